// SPDX-License-Identifier: MIT
// Mistral-style tool calls on a live mlxcel-server, driven by the official `openai` npm package.
// The demo model gets a tokenizer with Mistral's [TOOL_CALLS] and [ARGS] special tokens (ids past
// the demo's own, inside its vocabulary) and a small Mistral-style chat template, once writing calls
// as `[TOOL_CALLS]NAME[ARGS]{...}` and once as `[TOOL_CALLS][{"name", "arguments"}]`. For each:
// tool_choice "required" and a named tool force a valid call in that form (finish_reason
// tool_calls, arguments valid against the tool's parameters), streamed as tool_calls deltas, also
// when the model writes the marker as its special token; and
// the [TOOL_CALLS] special token, when generated (forced here by logit_bias), stays in the text of
// a request with tools (Mistral's markers are special tokens) but not of one without.
// Usage: node mistral_calls_suite.mjs MLXCEL_SERVER   (run from the repository root)
import fs from 'node:fs';
import path from 'node:path';
import { demo, demoCopy, finish, ok, startServer, startWatchdog, stopServer } from './live_server.mjs';

const bin = process.argv[2];
const TOOL_CALLS = 151669, ARGS = 151670;

const head = "{%- if tools %}[AVAILABLE_TOOLS]{{ tools|tojson }}[/AVAILABLE_TOOLS]{%- endif %}" +
  "{%- for m in messages %}{%- if m.role == 'user' %}[INST]{{ m.content }}[/INST]" +
  "{%- elif m.role == 'assistant' %}{%- if m.tool_calls %}";
const tail = "{%- else %}{{ m.content }}{%- endif %}</s>{%- endif %}{%- endfor %}";
const templates = {
  args: head + "{%- for tc in m.tool_calls %}[TOOL_CALLS]{{ tc.function.name }}[ARGS]{{ tc.function.arguments }}{%- endfor %}" + tail,
  list: head + "[TOOL_CALLS][{%- for tc in m.tool_calls %}{{ {'name': tc.function.name, 'arguments': tc.function.arguments}|tojson }}" +
        "{%- if not loop.last %}, {% endif %}{%- endfor %}]" + tail,
};

const tok = JSON.parse(fs.readFileSync(path.join(demo, 'tokenizer.json'), 'utf8'));
for (const [id, content] of [[TOOL_CALLS, '[TOOL_CALLS]'], [ARGS, '[ARGS]']])
  tok.added_tokens.push({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
startWatchdog(240000);

async function start(form) {
  const dir = demoCopy(`mlxcel-mistral-${form}-`, { own: ['tokenizer.json', 'tokenizer_config.json'] });
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(tok));
  fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify({ bos_token: '<s>', eos_token: '<|im_end|>' }));
  fs.writeFileSync(path.join(dir, 'chat_template.jinja'), templates[form]);
  return startServer(bin, ['-m', dir, '--parallel', '2', '--ctx', '1024']);
}

const tools = [
  { type: 'function', function: { name: 'get_weather', parameters: { type: 'object',
    properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['c', 'f'] } }, required: ['city', 'unit'] } } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { tz: { type: 'string', maxLength: 6 } }, required: ['tz'] } } },
];
const valid = (c) => {
  let a = null;
  try { a = JSON.parse(c.function.arguments); } catch { return false; }
  return (c.function.name === 'get_weather' && typeof a.city === 'string' && ['c', 'f'].includes(a.unit)) ||
         (c.function.name === 'get_time' && typeof a.tz === 'string' && a.tz.length <= 6);
};

try {
  for (const form of ['args', 'list']) {
    const srv = await start(form);
    const { client } = srv;
    const msgs = [{ role: 'user', content: 'Weather in Paris?' }];
    let answered = 0;
    for (const seed of [1, 2, 3]) {
      const r = await client.chat.completions.create({ model: 'd', messages: msgs, tools, tool_choice: 'required', temperature: 0.8, seed, max_tokens: 300 });
      const c = r.choices[0], calls = c.message.tool_calls ?? [];
      if (c.finish_reason === 'length') continue;
      answered++;
      ok(c.finish_reason === 'tool_calls' && calls.length >= 1 && calls.every(valid) && !c.message.content,
         `${form}: required, seed ${seed} -> ${JSON.stringify(calls.map((x) => x.function))} (${c.finish_reason}, content ${JSON.stringify(c.message.content)})`);
    }
    ok(answered > 0, `${form}: ${answered}/3 forced answers finished`);
    const deltas = [];
    let finish = null;
    for await (const ch of await client.chat.completions.create({ model: 'd', messages: msgs, tools, stream: true, temperature: 0.8, seed: 7,
      max_tokens: 200, tool_choice: { type: 'function', function: { name: 'get_time' } }, parallel_tool_calls: false })) {
      for (const d of ch.choices[0]?.delta.tool_calls ?? []) deltas.push(d);
      finish = ch.choices[0]?.finish_reason ?? finish;
    }
    ok(finish === 'tool_calls' && deltas.length === 1 && deltas[0].index === 0 && deltas[0].function.name === 'get_time' && valid(deltas[0]),
       `${form}: named, streamed -> ${JSON.stringify(deltas)} (${finish})`);
    // A forced call may use the marker token itself (biased here, as the demo model never learned it).
    const own = await client.chat.completions.create({ model: 'd', messages: msgs, tools, tool_choice: 'required', parallel_tool_calls: false,
      logit_bias: { [TOOL_CALLS]: 100 }, logprobs: true, temperature: 0.8, seed: 4, max_tokens: 200 });
    const oc = own.choices[0];
    ok(oc.logprobs?.content?.[0]?.token === '[TOOL_CALLS]' && oc.finish_reason === 'tool_calls' && oc.message.tool_calls?.length === 1 &&
       valid(oc.message.tool_calls[0]), `${form}: forced call written with the [TOOL_CALLS] token -> first token ` +
       `${JSON.stringify(oc.logprobs?.content?.[0]?.token)}, ${JSON.stringify(oc.message.tool_calls?.map((x) => x.function))} (${oc.finish_reason})`);
    // The special token in the text: kept with tools (so the parser sees the marker), dropped without.
    const bias = { logit_bias: { [TOOL_CALLS]: 100 }, temperature: 0, max_tokens: 3 };
    const withTools = await client.chat.completions.create({ model: 'd', messages: msgs, tools, ...bias });
    ok(withTools.choices[0].message.content === '[TOOL_CALLS]'.repeat(3) && !withTools.choices[0].message.tool_calls,
       `${form}: generated [TOOL_CALLS] tokens with tools, no call after them -> content ${JSON.stringify(withTools.choices[0].message.content)}`);
    const without = await client.chat.completions.create({ model: 'd', messages: msgs, ...bias });
    ok(without.choices[0].message.content === '' && without.usage.completion_tokens === 3,
       `${form}: without tools special tokens stay out of the text -> ${JSON.stringify(without.choices[0].message.content)}`);
    await stopServer(srv, `${form}: `);
  }
} catch (e) {
  ok(false, `unexpected error: ${e.stack ?? e}`);
}
finish();
