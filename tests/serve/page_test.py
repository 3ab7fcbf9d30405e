#!/usr/bin/python3
"""Headless Chromium test of the `pldr serve` page (CTest serve_page): loads `/`, types a prompt,
clicks Generate, waits for streamed text and a drawn G_LM heatmap (canvas pixels, eps_G polylines),
checks that G_LM was drawn at least every 10 generated tokens while the text streamed (the page's
dataset.drawnAt), and saves a screenshot. The model is the bundled default, models/pldr-sotu-small. Drives Chromium over the DevTools protocol (python3-websocket).
Exits 77 (skipped) with a message when chromium or python3-websocket is absent.

Usage: page_test.py PLDR [SCREENSHOT.png [MODEL_DIR [PROMPT]]]
(docs/serve-page.png: page_test.py build/pldr docs/serve-page.png models/pldr-sotu-small
 "Fellow citizens, the state of our Union is")"""
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import ROOT, Server, check  # noqa: E402

PLDR = sys.argv[1]
SHOT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(tempfile.gettempdir(), "pldr-serve-page.png")
MODEL = sys.argv[3] if len(sys.argv) > 3 else os.path.join(ROOT, "models", "pldr-sotu-small")
PROMPT = sys.argv[4] if len(sys.argv) > 4 else "Fellow citizens, the state of our Union is"
MAX_TOKENS = 48

chrome = shutil.which("chromium") or shutil.which("chromium-browser")
if not chrome:
    print("serve_page: SKIPPED: chromium is not installed (apt-get install chromium)")
    sys.exit(77)
try:
    import websocket  # python3-websocket
except ImportError:
    print("serve_page: SKIPPED: python3-websocket is not installed (apt-get install python3-websocket)")
    sys.exit(77)


class Tab:
    def __init__(self, ws_url):
        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.n = 0

    def call(self, method, **params):
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            m = json.loads(self.ws.recv())
            if m.get("id") == self.n:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})

    def js(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"JS error in {expr[:60]}: {r['exceptionDetails']}")
        return r["result"].get("value")


def main():
    s = Server(PLDR, model=MODEL, args=["--parallel", "2"])
    prof = tempfile.mkdtemp(prefix="pldr-chromium-")
    cr = subprocess.Popen([chrome, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--disable-quic", "--disable-background-networking", "--disable-component-update",
                           "--disable-sync", "--remote-debugging-port=0", f"--user-data-dir={prof}",
                           "--window-size=1280,900",
                           "--remote-allow-origins=*", "about:blank"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = os.path.join(prof, "DevToolsActivePort")
        t0 = time.time()
        while not os.path.exists(port_file) and time.time() - t0 < 60:
            time.sleep(0.1)
        check(os.path.exists(port_file), "chromium did not start")
        time.sleep(0.2)
        dport = int(open(port_file).read().split()[0])
        tabs = json.load(urllib.request.urlopen(f"http://127.0.0.1:{dport}/json"))
        page = next(t for t in tabs if t["type"] == "page")
        tab = Tab(page["webSocketDebuggerUrl"])
        tab.call("Page.enable")
        tab.call("Emulation.setDeviceMetricsOverride", width=1200, height=820, deviceScaleFactor=1, mobile=False)
        tab.call("Page.navigate", url=f"http://127.0.0.1:{s.port}/")
        t0 = time.time()
        while tab.js("document.readyState") != "complete" or tab.js("document.getElementById('go')===null"):
            check(time.time() - t0 < 30, "page did not load")
            time.sleep(0.1)
        # Type the prompt (key events into the focused textarea), set the settings, click Generate.
        tab.js("(()=>{const p=document.getElementById('prompt');p.value='';p.focus();return 1})()")
        tab.call("Input.insertText", text=PROMPT)
        tab.js("document.getElementById('max_tokens').value='%d';document.getElementById('temperature').value='0.7'"
           % MAX_TOKENS)
        check(tab.js("document.getElementById('prompt').value") == PROMPT, "typing failed")
        tab.js("document.getElementById('go').click()")
        # Streamed text appears while generating: wait for partial output before the end.
        t0 = time.time()
        seen_partial = False
        while time.time() - t0 < 120:
            gen = tab.js("(document.getElementById('gen')||{}).textContent||''")
            done = tab.js("document.body.dataset.done") == "1"
            if gen and not done:
                seen_partial = True
            if done:
                break
            time.sleep(0.05)
        check(tab.js("document.body.dataset.done") == "1", "generation did not finish: " +
              str(tab.js("document.getElementById('status').textContent")))
        gen = tab.js("document.getElementById('gen').textContent")
        check(len(gen) > 0, "no streamed text")
        status = tab.js("document.getElementById('status').textContent")
        check(status.startswith("done"), f"status {status}")
        draws = int(tab.js("document.body.dataset.heatmapDraws||'0'"))
        check(draws >= 1, "heatmap never drawn")
        # G_LM drawn at least every 10 generated tokens: the token counts of the draws start by
        # token 10, step by at most 10, and end at the last token (the server's own count).
        tokens = int(tab.js("document.body.dataset.tokens||'0'"))
        usage = tab.js("document.body.dataset.usageTokens||''")
        check(tokens > 10 and (usage == "" or int(usage) == tokens), f"{tokens} tokens, usage {usage}")
        at = [int(x) for x in (tab.js("document.body.dataset.drawnAt||''") or "").split(",") if x]
        gaps = [b - a for a, b in zip([0] + at, at)]
        check(at and at[-1] == tokens and max(gaps) <= 10,
              f"G_LM drawn at tokens {at} of {tokens}: a gap of more than 10")
        # The heatmap is really drawn: many coloured (non-white, non-grey) pixels on the canvas.
        colored = tab.js("""(()=>{const c=document.getElementById('heat');const d=c.getContext('2d')
            .getImageData(0,0,c.width,c.height).data;let n=0;for(let i=0;i<d.length;i+=4){
            const r=d[i],g=d[i+1],b=d[i+2],a=d[i+3];if(a>0&&(Math.abs(r-g)>30||Math.abs(r-b)>30))n++}return n})()""")
        check(colored > 2000, f"heatmap has only {colored} coloured pixels")
        lines = tab.js("document.querySelectorAll('#eps polyline').length")
        pts = tab.js("(document.querySelector('#eps polyline')||{getAttribute:()=>''}).getAttribute('points')")
        layers = s.post("/v1/deductive", {"prompt": "a"})[1]["layers"]
        check(lines == layers and len(pts.split()) >= 2, f"eps_G chart: {lines} lines, points {pts[:60]}")
        shot = tab.call("Page.captureScreenshot", format="png")
        os.makedirs(os.path.dirname(os.path.abspath(SHOT)), exist_ok=True)
        tmp = SHOT + ".tmp"
        with open(tmp, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        os.replace(tmp, SHOT)
        print(f"serve_page: streamed {tokens} tokens, {len(gen)} chars (partial text seen: {seen_partial}); "
              f"G_LM drawn {draws}x, at tokens {at} (largest gap {max(gaps)}), {colored} coloured "
              f"pixels; eps_G lines {lines}; screenshot {SHOT}")
    finally:
        cr.terminate()
        try:
            cr.wait(20)
        except subprocess.TimeoutExpired:
            cr.kill()
        shutil.rmtree(prof, ignore_errors=True)
        code = s.stop()
    check(code == 0, f"server exit code {code}")


if __name__ == "__main__":
    main()
