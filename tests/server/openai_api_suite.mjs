// SPDX-License-Identifier: MIT
// The request features beyond plain generation, driven by the official `openai` npm package
// against a live mlxcel-server (demo model with the Qwen3 chat template, ephemeral port):
// response_format json_schema (the answer parses and has the schema's shape), tools with
// tool_choice "required" and a named function (a valid call of a listed tool, finish_reason
// tool_calls), n: 3 (three choices, indexes 0..2, distinct seeds; streamed, the same choices),
// logit_bias +100 on one token with greedy decoding (every token is that token), embeddings (normalized, batched like alone, base64,
// dimensions), and a 400 naming an unsupported field.
// Usage: node openai_api_suite.mjs MLXCEL_SERVER   (run from the repository root)
import OpenAI from 'openai';
import { demoCopy, finish, ok, qwen3TokenizerConfig, startServer, startWatchdog, stopServer } from './live_server.mjs';

const bin = process.argv[2];
startWatchdog(240000);
const tmp = demoCopy('mlxcel-api-', { tokenizerConfig: qwen3TokenizerConfig });
const srv = await startServer(bin, ['-m', tmp, '--parallel', '4', '--ctx', '1024']);
const { port, client } = srv;
const noThink = { chat_template_kwargs: { enable_thinking: false } };

try {
  // response_format json_schema
  const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 16 }, age: { type: 'integer', minimum: 0, maximum: 120 },
    pets: { type: 'array', maxItems: 3, items: { enum: ['cat', 'dog'] } } }, required: ['name', 'age', 'pets'], additionalProperties: false };
  let stopped = 0;
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create({ model: 'd', messages: [{ role: 'user', content: 'Describe a person as JSON.' }],
      response_format: { type: 'json_schema', json_schema: { name: 'person', schema, strict: true } }, temperature: 0.8, seed, max_tokens: 200, ...noThink });
    const c = r.choices[0];
    if (c.finish_reason !== 'stop') continue;
    stopped++;
    let doc = null;
    try { doc = JSON.parse(c.message.content); } catch { /* checked below */ }
    ok(doc && typeof doc.name === 'string' && doc.name.length <= 16 && Number.isInteger(doc.age) && doc.age >= 0 && doc.age <= 120 &&
       Array.isArray(doc.pets) && doc.pets.length <= 3 && doc.pets.every((p) => p === 'cat' || p === 'dog') && Object.keys(doc).length === 3,
       `json_schema seed ${seed}: ${c.message.content}`);
  }
  ok(stopped > 0, `json_schema: ${stopped}/3 answers finished`);

  // tools, tool_choice required and named
  const tools = [
    { type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object',
      properties: { city: { type: 'string', maxLength: 20 }, unit: { enum: ['c', 'f'] } }, required: ['city', 'unit'] } } },
    { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { tz: { type: 'string', maxLength: 8 } }, required: ['tz'] } } },
  ];
  const req = await client.chat.completions.create({ model: 'd', messages: [{ role: 'user', content: 'Weather in Paris?' }], tools,
    tool_choice: 'required', temperature: 0.7, seed: 4, max_tokens: 300, ...noThink });
  const calls = req.choices[0].message.tool_calls ?? [];
  ok(req.choices[0].finish_reason === 'tool_calls' && calls.length >= 1, `tool_choice required -> ${calls.length} call(s), finish ${req.choices[0].finish_reason}`);
  for (const call of calls) {
    let args = null;
    try { args = JSON.parse(call.function.arguments); } catch { /* checked below */ }
    const valid = call.type === 'function' && typeof call.id === 'string' && args !== null &&
      ((call.function.name === 'get_weather' && typeof args.city === 'string' && ['c', 'f'].includes(args.unit)) ||
       (call.function.name === 'get_time' && typeof args.tz === 'string' && args.tz.length <= 8));
    ok(valid, `tool call ${call.function.name}(${call.function.arguments}) is valid`);
  }
  const named = await client.chat.completions.create({ model: 'd', messages: [{ role: 'user', content: 'What time is it?' }], tools,
    tool_choice: { type: 'function', function: { name: 'get_time' } }, parallel_tool_calls: false, temperature: 0.7, seed: 9, max_tokens: 200, ...noThink });
  const nc = named.choices[0].message.tool_calls ?? [];
  ok(nc.length === 1 && nc[0].function.name === 'get_time' && typeof JSON.parse(nc[0].function.arguments).tz === 'string',
     `named tool_choice, parallel_tool_calls false -> ${JSON.stringify(nc.map((c) => c.function))}`);

  // streamed: the forced call arrives as tool_calls deltas, finish_reason tool_calls
  let streamed = [], sfinish = null;
  for await (const c of await client.chat.completions.create({ model: 'd', messages: [{ role: 'user', content: 'Weather in Rome?' }], tools,
    tool_choice: { type: 'function', function: { name: 'get_weather' } }, parallel_tool_calls: false, temperature: 0.7, seed: 5, max_tokens: 200,
    stream: true, ...noThink })) {
    if (!c.choices.length) continue;
    for (const d of c.choices[0].delta.tool_calls ?? []) streamed.push(d);
    sfinish = c.choices[0].finish_reason ?? sfinish;
  }
  ok(sfinish === 'tool_calls' && streamed.length === 1 && streamed[0].index === 0 && streamed[0].function.name === 'get_weather' &&
     ['c', 'f'].includes(JSON.parse(streamed[0].function.arguments).unit), `streamed tool call delta ${JSON.stringify(streamed)} (${sfinish})`);

  // n: 3
  const three = await client.chat.completions.create({ model: 'd', messages: [{ role: 'user', content: 'Tell me a story.' }], n: 3,
    temperature: 1.0, seed: 11, max_tokens: 12, ignore_eos: true, ...noThink });
  ok(three.choices.length === 3 && three.choices.every((c, i) => c.index === i && typeof c.message.content === 'string'),
     `n: 3 -> ${three.choices.length} choices`);
  ok(new Set(three.choices.map((c) => c.message.content)).size > 1, 'n: 3 choices differ (seed, seed+1, seed+2)');
  ok(three.usage.completion_tokens === 36, `n: 3 usage counts every choice (${three.usage.completion_tokens} of 3 x 12)`);

  // n: 3 streamed: the client's stream helper assembles the choices by index; each equals the same
  // choice of the answer above (same seeds), and the usage chunk counts every choice
  const stream3 = client.chat.completions.stream({ model: 'd', messages: [{ role: 'user', content: 'Tell me a story.' }], n: 3,
    temperature: 1.0, seed: 11, max_tokens: 12, ignore_eos: true, stream_options: { include_usage: true }, ...noThink });
  const seen = new Set();
  stream3.on('chunk', (c) => { for (const ch of c.choices) seen.add(ch.index); });
  const final3 = await stream3.finalChatCompletion();
  ok(final3.choices.length === 3 && final3.choices.every((c, i) => c.index === i && c.message.content === three.choices[i].message.content &&
     c.finish_reason === three.choices[i].finish_reason) && seen.size === 3,
     `n: 3 streamed -> ${JSON.stringify(final3.choices.map((c) => c.message.content))}`);
  ok(final3.usage?.completion_tokens === 36, `n: 3 streamed usage counts every choice (${final3.usage?.completion_tokens})`);

  // logit_bias +100 with greedy decoding
  const target = 14990;  // "hello" in the demo vocabulary
  const biased = await client.completions.create({ model: 'd', prompt: 'The capital of France is', max_tokens: 4, temperature: 0,
    logit_bias: { [target]: 100 }, logprobs: 1 });
  ok(biased.choices[0].text === 'hello'.repeat(4), `logit_bias +100 on token ${target} -> ${JSON.stringify(biased.choices[0].text)}`);

  // embeddings: L2-normalized, batched equals alone, base64 equals float, dimensions
  const norm = (v) => Math.sqrt(v.reduce((a, x) => a + x * x, 0));
  const emb = await client.embeddings.create({ model: 'd', input: ['The cat sat on the mat.', 'A dog ran in the park.', 'The cat sat on the mat.'],
    encoding_format: 'float' });
  const vs = emb.data.map((d) => d.embedding);
  ok(emb.data.length === 3 && emb.data.every((d, i) => d.index === i && d.object === 'embedding') && vs.every((v) => v.length === 256),
     `embeddings: 3 vectors of ${vs[0]?.length} values`);
  ok(vs.every((v) => Math.abs(norm(v) - 1) < 1e-5), 'embeddings are L2-normalized');
  ok(JSON.stringify(vs[0]) === JSON.stringify(vs[2]) && JSON.stringify(vs[0]) !== JSON.stringify(vs[1]), 'same input, same vector; other input, other vector');
  const alone = await client.embeddings.create({ model: 'd', input: 'A dog ran in the park.', encoding_format: 'float' });
  ok(alone.data[0].embedding.every((x, i) => Math.abs(x - vs[1][i]) < 1e-6), 'an input alone embeds like in a batch');
  ok(emb.usage.prompt_tokens > 0 && emb.usage.total_tokens === emb.usage.prompt_tokens, `embeddings usage ${JSON.stringify(emb.usage)}`);
  const b64 = await fetch(`http://127.0.0.1:${port}/v1/embeddings`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ input: 'A dog ran in the park.', encoding_format: 'base64' }) }).then((r) => r.json());
  const raw = Buffer.from(b64.data[0].embedding, 'base64');
  const f32 = new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.length));
  ok(f32.length === 256 && Array.from(f32).every((x, i) => x === Math.fround(alone.data[0].embedding[i])), 'base64 encoding carries the same float32 values');
  const short = await client.embeddings.create({ model: 'd', input: [[785, 6722, 315, 9625]], dimensions: 64, encoding_format: 'float' });
  ok(short.data[0].embedding.length === 64 && Math.abs(norm(short.data[0].embedding) - 1) < 1e-5, 'dimensions: 64 values, renormalized; token-id input');
  try {
    await client.embeddings.create({ model: 'd', input: 'x', dimensions: 100000 });
    ok(false, 'dimensions beyond the hidden size rejected');
  } catch (e) {
    ok(e instanceof OpenAI.BadRequestError && /dimensions/.test(e.message), `dimensions beyond the hidden size -> 400 (${e.message})`);
  }

  // a field the server does not implement is named in a 400
  try {
    await client.completions.create({ model: 'd', prompt: 'x', suffix: 'y' });
    ok(false, 'unsupported field rejected');
  } catch (e) {
    ok(e instanceof OpenAI.BadRequestError && /'suffix'/.test(e.error?.message ?? e.message), `unsupported field -> 400 (${e.message})`);
  }
} catch (e) {
  ok(false, `unexpected error: ${e.stack ?? e}`);
}

await stopServer(srv);
finish();
