// SPDX-License-Identifier: MIT
// Server tests with the official `openai` npm package against a live mlxcel-server (the demo
// model with the Qwen3 chat template, ephemeral port): chat and completions, JSON and streaming,
// usage, stop, error classes, and a bounded concurrency test: 16 clients at once, each answer at
// temperature 0 equal to the answer the same request gets alone.
// Usage: node openai_suite.mjs MLXCEL_SERVER   (run from the repository root)
import OpenAI from 'openai';
import { demoCopy, finish, ok, qwen3TokenizerConfig, startServer, startWatchdog, stopServer } from './live_server.mjs';

const bin = process.argv[2];
const eq = (a, b, what) => ok(JSON.stringify(a) === JSON.stringify(b), `${what}${JSON.stringify(a) === JSON.stringify(b) ? '' : `: ${JSON.stringify(a)} != ${JSON.stringify(b)}`}`);

startWatchdog(120000);
// A chat-capable copy of the demo model.
const tmp = demoCopy('mlxcel-openai-', { tokenizerConfig: qwen3TokenizerConfig });
const srv = await startServer(bin, ['-m', tmp, '--parallel', '4', '--ctx', '512', '--api-key', 'k'], { apiKey: 'k', timeout: 30000 });
const { port, client } = srv;
const noThink = { chat_template_kwargs: { enable_thinking: false } };

try {
  const models = await client.models.list();
  ok(models.data.length === 1 && models.data[0].object === 'model', 'models.list');

  const chat = await client.chat.completions.create({
    model: 'demo', messages: [{ role: 'user', content: 'Hello there' }], max_tokens: 8, temperature: 0, ...noThink });
  ok(chat.object === 'chat.completion' && typeof chat.choices[0].message.content === 'string', 'chat.completions.create');
  ok(chat.usage.completion_tokens <= 8 && chat.usage.total_tokens === chat.usage.prompt_tokens + chat.usage.completion_tokens, 'chat usage');

  const stream = await client.chat.completions.create({
    model: 'demo', messages: [{ role: 'user', content: 'Hello there' }], max_tokens: 8, temperature: 0, ...noThink,
    stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null;
  for await (const c of stream) {
    if (c.usage) usage = c.usage;
    if (c.choices.length) { text += c.choices[0].delta.content ?? ''; finish = c.choices[0].finish_reason ?? finish; }
  }
  eq(text, chat.choices[0].message.content, 'streamed chat text equals the JSON answer');
  eq(finish, chat.choices[0].finish_reason, 'streamed finish_reason');
  eq(usage, chat.usage, 'streamed usage');

  const comp = await client.completions.create({ model: 'demo', prompt: 'The capital of France is', max_tokens: 10, temperature: 0 });
  ok(comp.object === 'text_completion' && typeof comp.choices[0].text === 'string', 'completions.create');
  const cstream = await client.completions.create({ model: 'demo', prompt: 'The capital of France is', max_tokens: 10, temperature: 0, stream: true });
  let ctext = '';
  for await (const c of cstream) ctext += c.choices[0]?.text ?? '';
  eq(ctext, comp.choices[0].text, 'streamed completion equals the JSON answer');

  // The stop test needs an answer with text after the stop string: a shorter one is a failure, not a skip.
  const whole = comp.choices[0].text;
  ok(whole.length > 4, `answer long enough for the stop test (${JSON.stringify(whole)})`);
  const stop = whole.slice(2, 4);
  const cut = await client.completions.create({ model: 'demo', prompt: 'The capital of France is', max_tokens: 10, temperature: 0, stop: [stop] });
  eq(cut.choices[0].text, whole.slice(0, whole.indexOf(stop)), `stop ${JSON.stringify(stop)}`);
  eq(cut.choices[0].finish_reason, 'stop', 'stop finish_reason');

  for (const [what, fn, cls, status] of [
    ['n=17 with stream', () => client.completions.create({ model: 'd', prompt: 'x', n: 17, stream: true }), OpenAI.BadRequestError, 400],
    ['missing messages', () => client.chat.completions.create({ model: 'd' }), OpenAI.BadRequestError, 400],
    ['bad temperature', () => client.chat.completions.create({ model: 'd', messages: [{ role: 'user', content: 'x' }], temperature: 'x' }), OpenAI.BadRequestError, 400],
    ['wrong key', () => new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'bad', timeout: 30000, maxRetries: 0 }).models.list(), OpenAI.AuthenticationError, 401],
  ]) {
    try { await fn(); ok(false, `${what} rejected`); } catch (e) {
      ok(e instanceof cls && e.status === status && typeof e.error?.message === 'string', `${what} -> ${status} (${e.constructor.name}: ${e.message})`);
    }
  }

  // Concurrency: 16 requests (chat and completions, JSON and streaming), alone, then all at once.
  const reqs = [];
  for (let i = 0; i < 16; i++) {
    const stream = i % 3 === 0;
    if (i % 2) reqs.push({ kind: 'chat', stream, body: { model: 'd', messages: [{ role: 'user', content: `Question ${i}: tell me about topic number ${i * 7}.` }], max_tokens: 6 + (i % 5), temperature: 0, ...noThink } });
    else reqs.push({ kind: 'comp', stream, body: { model: 'd', prompt: `Story ${i}: ` + 'once upon a time '.repeat(1 + (i % 4)), max_tokens: 6 + (i % 5), temperature: 0, ignore_eos: true } });
  }
  const run = async (r) => {
    if (r.kind === 'chat') {
      if (!r.stream) { const a = await client.chat.completions.create(r.body); return [a.choices[0].message.content, a.choices[0].finish_reason]; }
      let t = '', f = null;
      for await (const c of await client.chat.completions.create({ ...r.body, stream: true })) if (c.choices.length) { t += c.choices[0].delta.content ?? ''; f = c.choices[0].finish_reason ?? f; }
      return [t, f];
    }
    if (!r.stream) { const a = await client.completions.create(r.body); return [a.choices[0].text, a.choices[0].finish_reason]; }
    let t = '', f = null;
    for await (const c of await client.completions.create({ ...r.body, stream: true })) if (c.choices.length) { t += c.choices[0].text ?? ''; f = c.choices[0].finish_reason ?? f; }
    return [t, f];
  };
  const alone = [];
  for (const r of reqs) alone.push(await run(r));
  const t0 = Date.now();
  const together = await Promise.all(reqs.map(run));
  let same = 0;
  for (let i = 0; i < 16; i++) {
    if (JSON.stringify(alone[i]) === JSON.stringify(together[i])) same++;
    else console.log(`  request ${i}: alone ${JSON.stringify(alone[i])} vs together ${JSON.stringify(together[i])}`);
  }
  ok(same === 16, `16 concurrent clients answered like alone at temperature 0 (${same}/16, ${Date.now() - t0} ms)`);
} catch (e) {
  ok(false, `unexpected error: ${e.stack ?? e}`);
}

await stopServer(srv);
finish();
