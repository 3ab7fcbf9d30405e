// The official OpenAI Node client against `pldr serve` (CTest serve_openai_node, issue 36).
// Usage: node openai_client_test.cjs NODE_MODULES_DIR BASE_URL
// Every call goes through the client's own request, streaming and error code; each check prints
// one line, and the first failure ends the run with exit code 1.
"use strict";
const path = require("node:path");

const [modulesDir, baseURL] = process.argv.slice(2);
const OpenAI = require(require.resolve("openai", { paths: [path.resolve(modulesDir)] }));

function check(ok, what) {
  if (!ok) {
    console.error("FAIL: " + what);
    process.exit(1);
  }
}

async function main() {
  const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 120000 });
  console.log(`openai ${OpenAI.VERSION || require(path.join(modulesDir, "openai/package.json")).version}`);

  // models.list: one model, and its id is the name every request uses.
  const models = await client.models.list();
  check(models.data.length === 1 && typeof models.data[0].id === "string", "models.list: one model");
  const model = models.data[0].id;
  const got = await client.models.retrieve(model).catch((e) => e);
  console.log(`models: ${model}` + (got instanceof OpenAI.APIError ? ` (retrieve: ${got.status})` : ""));

  // A completion, greedy: text, finish_reason, usage; the same request gives the same text.
  const req = { model, prompt: "The quick brown fox", max_tokens: 12, temperature: 0 };
  const c1 = await client.completions.create(req);
  const c2 = await client.completions.create(req);
  check(c1.object === "text_completion" && c1.choices.length === 1, "completion: one choice");
  check(typeof c1.choices[0].text === "string" && c1.choices[0].text.length > 0, "completion: text");
  check(["length", "stop"].includes(c1.choices[0].finish_reason), "completion: finish_reason");
  check(c1.usage.completion_tokens >= 1 && c1.usage.completion_tokens <= 12, "completion: usage");
  check(c1.usage.total_tokens === c1.usage.prompt_tokens + c1.usage.completion_tokens, "usage sums");
  check(c1.choices[0].text === c2.choices[0].text, "greedy completions agree");
  console.log(`completion: ${JSON.stringify(c1.choices[0].text)} (${c1.usage.completion_tokens} tokens)`);

  // n = 2 with a seed: two choices, prompt tokens counted once.
  const cn = await client.completions.create({ ...req, n: 2, temperature: 0.8, seed: 7 });
  check(cn.choices.length === 2 && cn.choices[1].index === 1, "n=2: two choices");
  check(cn.usage.prompt_tokens === c1.usage.prompt_tokens, "n=2: prompt tokens counted once");

  // Logprobs: one entry per token, top alternatives included.
  const lp = await client.completions.create({ ...req, max_tokens: 4, logprobs: 3 });
  const L = lp.choices[0].logprobs;
  check(L && L.tokens.length === L.token_logprobs.length && L.tokens.length >= 1, "logprobs: tokens");
  check(L.token_logprobs.every((v) => v <= 0), "logprobs <= 0");
  check(Object.keys(L.top_logprobs[0]).length >= 1, "top_logprobs");

  // Streaming completion: the chunks concatenate to the non-streamed greedy text.
  const stream = await client.completions.create({ ...req, stream: true });
  let streamed = "";
  let chunks = 0;
  for await (const ch of stream) {
    chunks++;
    streamed += ch.choices.map((x) => x.text || "").join("");
  }
  check(chunks >= 2 && streamed === c1.choices[0].text, `stream: ${JSON.stringify(streamed)}`);
  console.log(`completion stream: ${chunks} chunks, same text`);

  // Chat, plain and streamed: the same assistant message.
  const chatReq = { model, messages: [{ role: "user", content: "Say something." }], max_tokens: 10, temperature: 0 };
  const chat = await client.chat.completions.create(chatReq);
  const msg = chat.choices[0].message;
  check(chat.object === "chat.completion" && msg.role === "assistant", "chat: assistant message");
  check(typeof msg.content === "string" && msg.content.length > 0, "chat: content");
  const cs = await client.chat.completions.create({ ...chatReq, stream: true });
  let chatText = "";
  for await (const ch of cs) chatText += ch.choices.map((x) => (x.delta && x.delta.content) || "").join("");
  check(chatText === msg.content, `chat stream ${JSON.stringify(chatText)} vs ${JSON.stringify(msg.content)}`);
  console.log(`chat: ${JSON.stringify(msg.content)}; streamed the same`);

  // Errors reach the client as APIError subclasses with the server's status and message.
  const bad = [
    ["max_tokens -1", () => client.completions.create({ ...req, max_tokens: -1 }), 400],
    ["unknown model", () => client.completions.create({ ...req, model: "no-such-model" }), 404],
    ["unsupported field", () => client.completions.create({ ...req, suffix: "x" }), 400],
    ["empty messages", () => client.chat.completions.create({ ...chatReq, messages: [] }), 400],
  ];
  for (const [what, call, status] of bad) {
    const e = await call().then(() => null, (x) => x);
    check(e instanceof OpenAI.APIError, `${what}: an APIError (got ${e})`);
    check(e.status === status, `${what}: status ${e.status}, not ${status}`);
    check(typeof e.message === "string" && e.message.length > 0, `${what}: a message`);
    console.log(`${what}: ${e.constructor.name} ${e.status} ${e.message.slice(0, 80)}`);
  }
  console.log("serve_openai_node: all checks passed");
}

main().catch((e) => {
  console.error("FAIL: " + (e && e.stack ? e.stack : e));
  process.exit(1);
});
