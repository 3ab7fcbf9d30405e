// The page at `/` (see page.h): a prompt box, streamed output, the sampling settings, a heatmap
// of G_LM per layer and head for the current text, and eps_G per generated step.
#include "serve/page.h"

namespace pldr::serve {

namespace {
const char* const kPage = R"PAGE(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>pldr serve</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:16px;color:#222;background:#fafafa}
h1{font-size:18px;margin:0 0 8px}
#wrap{display:flex;gap:16px;flex-wrap:wrap}
#left{flex:1 1 420px;min-width:360px}#right{flex:1 1 420px}
textarea{width:100%;height:90px;font:13px monospace;box-sizing:border-box}
label{margin-right:10px;white-space:nowrap}input[type=number]{width:70px}
#out{white-space:pre-wrap;font:13px monospace;background:#fff;border:1px solid #ccc;padding:8px;min-height:120px}
#out .p{color:#777}#status{color:#555;margin:6px 0}
canvas{background:#fff;border:1px solid #ccc}svg{background:#fff;border:1px solid #ccc}
.note{color:#666;font-size:12px}
</style></head><body>
<h1>pldr serve &mdash; <span id="model">model</span></h1>
<div id="wrap"><div id="left">
<textarea id="prompt">The quick brown fox</textarea>
<div><label>max_tokens <input id="max_tokens" type="number" value="32" min="1"></label>
<label>temperature <input id="temperature" type="number" value="0.8" step="0.1" min="0"></label>
<label>top_p <input id="top_p" type="number" value="0.95" step="0.05" min="0.01" max="1"></label>
<label>top_k <input id="top_k" type="number" value="40" min="0"></label>
<label>seed <input id="seed" type="number" value="1"></label>
<button id="go">Generate</button> <button id="stop" disabled>Stop</button></div>
<div id="status">ready</div>
<div id="out"></div>
</div><div id="right">
<div><b>G<sub>LM</sub></b> per layer (rows) and head (columns) for the current text
<span class="note">(blue &lt; 0 &lt; red, each matrix scaled to its own max |value|)</span></div>
<canvas id="heat" width="540" height="300"></canvas>
<div><b>eps_G</b> per generated step and layer: relative RMS change of G<sub>LM</sub> from the
prompt's operator <span class="note">(0 = the operator is collapsed: a KVG cache is exact)</span></div>
<svg id="eps" width="540" height="200"></svg>
</div></div>
<script>
"use strict";
const $=id=>document.getElementById(id);
let ctl=null,draws=0;
fetch('/v1/models').then(r=>r.json()).then(j=>{$('model').textContent=j.data[0].id+' (context '+j.data[0].max_model_len+')'});
function color(v){const t=Math.max(-1,Math.min(1,v));const a=Math.round(255*(1-Math.abs(t)));
 return t>=0?`rgb(255,${a},${a})`:`rgb(${a},${a},255)`}
function drawHeat(d){const c=$('heat'),g=c.getContext('2d');const L=d.layers,H=d.heads,D=d.head_dim;
 const pad=18,cell=Math.max(2,Math.min(12,Math.floor((c.width-pad*(H+1))/(H*D))));
 const h=pad+L*(D*cell+pad);if(c.height!==h)c.height=h;
 g.clearRect(0,0,c.width,c.height);g.font='11px sans-serif';g.fillStyle='#333';
 for(let l=0;l<L;l++)for(let h=0;h<H;h++){const M=d.G_LM[l][h];let mx=0;
  for(const r of M)for(const v of r)mx=Math.max(mx,Math.abs(v));mx=mx||1;
  const x0=pad+h*(D*cell+pad),y0=pad+l*(D*cell+pad);g.fillStyle='#333';
  g.fillText(`L${l} H${h}`,x0,y0-4);
  for(let i=0;i<D;i++)for(let j=0;j<D;j++){g.fillStyle=color(M[i][j]/mx);g.fillRect(x0+j*cell,y0+i*cell,cell,cell)}}
 draws++;document.body.dataset.heatmapDraws=draws}
function drawEps(d){const s=$('eps'),W=+s.getAttribute('width'),H=+s.getAttribute('height');
 const e=d.eps_G||[];let html='';const cols=['#d62728','#1f77b4','#2ca02c','#ff7f0e','#9467bd','#8c564b'];
 let lo=Infinity,hi=0;for(const r of e)for(const v of r)if(v>0){hi=Math.max(hi,v);lo=Math.min(lo,v)}
 if(!(hi>0)){hi=1;lo=1e-6}hi*=2;lo=Math.max(Math.min(lo/2,hi/100),hi/1e8);
 const X=t=>30+(W-40)*(e.length>1?t/(e.length-1):0.5),Y=v=>{const y=Math.log10(Math.max(v,lo));
  return H-20-(H-30)*(y-Math.log10(lo))/(Math.log10(hi)-Math.log10(lo))};
 html+=`<text x="4" y="12" font-size="10">${hi.toExponential(0)}</text><text x="4" y="${H-22}" font-size="10">${lo.toExponential(0)}</text>`;
 html+=`<text x="${W/2}" y="${H-4}" font-size="10">step (${e.length} generated tokens)</text>`;
 for(let l=0;l<d.layers;l++){const pts=e.map((r,t)=>X(t).toFixed(1)+','+Y(r[l]).toFixed(1)).join(' ');
  html+=`<polyline fill="none" stroke="${cols[l%6]}" stroke-width="1.5" points="${pts}"/>`;
  html+=`<text x="${W-60}" y="${14+12*l}" font-size="10" fill="${cols[l%6]}">layer ${l}</text>`}
 s.innerHTML=html}
// G_LM is drawn for the text at every 4th streamed token, in order, each draw at most 8 tokens past
// the one before (when /v1/deductive is slower than the stream, the drawing lags and catches up
// rather than skipping), and once for the final text. dataset.drawnAt lists the token counts drawn.
let snaps=[],drawn=0,drawnAt=[],busy=false;
async function deductive(s){const r=await fetch('/v1/deductive',{method:'POST',headers:{'Content-Type':'application/json'},
  body:JSON.stringify({prompt:s.prompt+s.text,prefix:s.prompt})});
 if(!r.ok)return false;const d=await r.json();drawHeat(d);drawEps(d);return true}
async function drawLoop(){if(busy)return;busy=true;
 try{for(;;){const ahead=snaps.filter(t=>t.n>drawn);if(!ahead.length)break;
  let s=ahead[0];for(const t of ahead)if(t.n<=drawn+8)s=t;
  let ok=false;try{ok=await deductive(s)}catch(e){}
  drawn=s.n;snaps=snaps.filter(t=>t.n>drawn);
  if(ok){drawnAt.push(s.n);document.body.dataset.drawnAt=drawnAt.join(',')}}}
 finally{busy=false}}
function snap(prompt,text,n){snaps.push({prompt,text,n});drawLoop()}
$('go').onclick=async()=>{const prompt=$('prompt').value;const body={prompt,stream:true,
  max_tokens:+$('max_tokens').value,temperature:+$('temperature').value,top_p:+$('top_p').value,
  top_k:+$('top_k').value,seed:+$('seed').value,logprobs:0};
 const out=$('out');out.innerHTML='';const p=document.createElement('span');p.className='p';p.textContent=prompt;
 out.appendChild(p);const gen=document.createElement('span');gen.id='gen';out.appendChild(gen);
 let text='',n=0;snaps=[];drawn=0;drawnAt=[];document.body.dataset.drawnAt='';document.body.dataset.done='0';ctl=new AbortController();$('stop').disabled=false;$('go').disabled=true;
 $('status').textContent='generating...';
 try{const r=await fetch('/v1/completions',{method:'POST',headers:{'Content-Type':'application/json'},
   body:JSON.stringify(body),signal:ctl.signal});
  if(!r.ok){const e=await r.json();$('status').textContent='error: '+e.error.message;return}
  const rd=r.body.getReader(),dec=new TextDecoder();let buf='',fin='';
  for(;;){const {value,done}=await rd.read();if(done)break;buf+=dec.decode(value,{stream:true});
   let k;while((k=buf.indexOf('\n\n'))>=0){const ev=buf.slice(0,k);buf=buf.slice(k+2);
    if(!ev.startsWith('data: '))continue;const data=ev.slice(6);if(data==='[DONE]')continue;
    const j=JSON.parse(data);if(j.error){$('status').textContent='error: '+j.error.message;continue}
    if(j.usage)document.body.dataset.usageTokens=j.usage.completion_tokens;const n0=n;
    for(const c of j.choices||[]){text+=c.text||'';if(c.finish_reason)fin=c.finish_reason;
     n+=c.logprobs&&c.logprobs.tokens?c.logprobs.tokens.length:(c.text?1:0)}
    gen.textContent=text;if(Math.floor(n/4)>Math.floor(n0/4))snap(prompt,text,n)}}
  if(n%4!==0)snap(prompt,text,n);document.body.dataset.tokens=n;
  while(busy||snaps.some(t=>t.n>drawn))await new Promise(r=>setTimeout(r,20));
  $('status').textContent='done ('+(fin||'?')+')';document.body.dataset.done='1'}
 catch(e){$('status').textContent=e.name==='AbortError'?'stopped':'error: '+e}
 finally{$('stop').disabled=true;$('go').disabled=false}};
$('stop').onclick=()=>{if(ctl)ctl.abort()};
</script></body></html>
)PAGE";
}  // namespace

const std::string& page_html() {
    static const std::string s = kPage;
    return s;
}

}  // namespace pldr::serve
