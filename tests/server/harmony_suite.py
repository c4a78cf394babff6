#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""gpt-oss's format (harmony) through a live mlxcel-server and the CLI, with scripted output.

The model folder is the demo model with a harmony tokenizer (its tokenizer.json plus gpt-oss's seven
harmony special tokens at ids inside its vocabulary), gpt-oss's real chat template and <|return|> as
eos_token. The demo model knows nothing of harmony, so its output is scripted by grammars in which
the markers are written as text (they match the special tokens) or by the server's own harmony
grammars (tool_choice, response_format):
  - /apply-template renders the harmony prompt, with reasoning_effort from chat_template_kwargs;
  - a grammar writing an analysis and a final message gives reasoning_content and content, and
    streamed, reasoning_content and content deltas with the same text and no marker in any delta;
  - tool_choice "required" and a named tool give a harmony call: tool_calls (finish_reason
    tool_calls, arguments valid JSON), streamed as a tool_calls delta;
  - response_format json_schema gives JSON content after an optional analysis;
  - an OpenAI-style history (content null, arguments as a JSON string) renders and runs;
  - `mlxcel generate` with the same grammar prints the reasoning between <think> and </think> and
    then the final text, the server's texts exactly (greedy, same prompt); `mlxcel chat` renders
    harmony prompts and keeps each answer as a final message.

usage: harmony_suite.py PATH/TO/mlxcel PATH/TO/mlxcel-server   (run from the repository root)"""
import json, os, re, shutil, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'pylib'))
from checks import check, finish  # noqa: E402
from live_server import DEMO, LiveServer, link_demo_model  # noqa: E402

MLXCEL, SERVER = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
TEMPLATE = os.path.abspath('tests/fixtures/gpt_oss_chat_template.jinja')
MARKERS = ['<|start|>', '<|end|>', '<|message|>', '<|channel|>', '<|constrain|>', '<|return|>', '<|call|>']


def make_model(dir):
    link_demo_model(dir, own=('tokenizer.json', 'tokenizer_config.json', 'chat_template.jinja'))
    tok = json.load(open(os.path.join(DEMO, 'tokenizer.json')))
    for i, m in enumerate(MARKERS):
        tok['added_tokens'].append({'id': 151669 + i, 'content': m, 'single_word': False, 'lstrip': False,
                                    'rstrip': False, 'normalized': False, 'special': True})
    json.dump(tok, open(os.path.join(dir, 'tokenizer.json'), 'w'))
    json.dump({'bos_token': '<|startoftext|>', 'eos_token': '<|return|>', 'pad_token': '<|endoftext|>'},
              open(os.path.join(dir, 'tokenizer_config.json'), 'w'))
    shutil.copy(TEMPLATE, os.path.join(dir, 'chat_template.jinja'))


def start_server(model):
    return LiveServer([SERVER, '-m', model, '-t', '2', '--ctx', '2048', '--parallel', '2'])


def no_marker(s):
    return s is None or ('<|' not in s and not any(s.endswith(m[:k]) for m in MARKERS for k in range(2, len(m))))


TOOLS = [{'type': 'function', 'function': {'name': 'get_weather', 'description': 'Weather in a city', 'parameters': {
    'type': 'object', 'properties': {'city': {'type': 'string', 'maxLength': 12}}, 'required': ['city']}}},
         {'type': 'function', 'function': {'name': 'now', 'description': 'The time'}}]
GRAMMAR = ('root ::= "<|channel|>analysis<|message|>" [a-z ]{4,24} "<|end|><|start|>assistant<|channel|>final<|message|>" '
           '[a-z ]{4,24}\n')
USER = [{'role': 'user', 'content': 'Tell me about the weather.'}]


def main():
    tmp = tempfile.mkdtemp(prefix='mlxcel-harmony-')
    try:
        make_model(tmp)
        s = start_server(tmp)
        try:
            run(s, tmp)
        finally:
            s.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


def run(s, model):
    st, r = s.post('/apply-template', {'messages': USER, 'chat_template_kwargs': {'reasoning_effort': 'high'}})
    p = r['prompt'] if st == 200 else ''
    check('apply-template renders harmony with reasoning_effort', st == 200 and p.startswith('<|start|>system<|message|>')
          and '\nReasoning: high\n' in p and p.endswith('<|start|>user<|message|>Tell me about the weather.<|end|><|start|>assistant'), r)

    st, r = s.post('/apply-template', {'messages': USER, 'reasoning_effort': 'low'})
    check('reasoning_effort (the request field) reaches the template', st == 200 and '\nReasoning: low\n' in r['prompt'], r)
    st, r = s.post('/apply-template', {'messages': USER, 'reasoning_effort': 'low', 'chat_template_kwargs': {'reasoning_effort': 'low'}})
    check('reasoning_effort given twice is a 400', st == 400 and 'twice' in r['error']['message'], r)
    st, r = s.post('/v1/chat/completions', {'messages': USER, 'reasoning_effort': 'extreme', 'max_tokens': 1})
    check('a bad reasoning_effort is a 400 naming it', st == 400 and 'reasoning_effort' in r['error']['message'], r)
    st, r = s.post('/v1/chat/completions', {'messages': USER, 'reasoning_effort': 'high', 'max_tokens': 2})
    check('reasoning_effort on a chat completion', st == 200, r)

    body = {'messages': USER, 'temperature': 0, 'max_tokens': 80, 'grammar': GRAMMAR}
    st, r = s.post('/v1/chat/completions', body)
    msg = r['choices'][0]['message'] if st == 200 else {}
    rc, c = msg.get('reasoning_content'), msg.get('content')
    check('analysis -> reasoning_content, final -> content', st == 200 and rc and c and
          re.fullmatch('[a-z ]{4,24}', rc) and re.fullmatch('[a-z ]{4,24}', c) and r['choices'][0]['finish_reason'] == 'stop', r)
    chunks = s.stream('/v1/chat/completions', body)
    deltas = [ch['choices'][0]['delta'] for ch in chunks if ch.get('choices')]
    srs = ''.join(d.get('reasoning_content') or '' for d in deltas)
    sc = ''.join(d.get('content') or '' for d in deltas)
    check('streamed reasoning_content and content deltas equal the answer', srs == rc and sc == c, (srs, sc, rc, c))
    check('no delta holds a marker or part of one',
          all(no_marker(d.get('content')) and no_marker(d.get('reasoning_content')) for d in deltas), deltas)
    check('reasoning streams before content', sum(1 for d in deltas if d.get('reasoning_content')) >= 1 and
          next(i for i, d in enumerate(deltas) if d.get('content')) > next(i for i, d in enumerate(deltas) if d.get('reasoning_content')), deltas)

    for choice in ('required', {'type': 'function', 'function': {'name': 'get_weather'}}):
        body = {'messages': USER, 'temperature': 0, 'max_tokens': 120, 'tools': TOOLS, 'tool_choice': choice}
        st, r = s.post('/v1/chat/completions', body)
        ch = r['choices'][0] if st == 200 else {}
        calls = ch.get('message', {}).get('tool_calls') or []
        args_ok = len(calls) == 1 and isinstance(json.loads(calls[0]['function']['arguments']), dict)
        named = choice == 'required' or (calls and calls[0]['function']['name'] == 'get_weather')
        check('tool_choice %s: one harmony call as tool_calls' % json.dumps(choice), st == 200 and args_ok and named and
              calls[0]['function']['name'] in ('get_weather', 'now') and ch['finish_reason'] == 'tool_calls' and
              no_marker(ch['message'].get('content')), r)
        chunks = s.stream('/v1/chat/completions', body)
        deltas = [c2['choices'][0]['delta'] for c2 in chunks if c2.get('choices')]
        streamed = [tc for d in deltas for tc in (d.get('tool_calls') or [])]
        fin = [c2['choices'][0]['finish_reason'] for c2 in chunks if c2.get('choices') and c2['choices'][0].get('finish_reason')]
        check('tool_choice %s streamed as a tool_calls delta' % json.dumps(choice), len(streamed) == 1 and calls and
              streamed[0]['function'] == calls[0]['function'] and fin == ['tool_calls'], (streamed, fin))

    # The demo model would fill the (free) analysis to max_tokens: logit_bias on <|end|> ends it at once
    # (the schema has no free string, where <|end|> would also match).
    schema = {'type': 'object', 'properties': {'ok': {'type': 'boolean'}, 'n': {'type': 'integer'}}, 'required': ['ok', 'n']}
    st, r = s.post('/v1/chat/completions', {'messages': USER, 'temperature': 0, 'max_tokens': 120,
                                            'logit_bias': {'151670': 100}, 'response_format': {
                                                'type': 'json_schema', 'json_schema': {'name': 'x', 'schema': schema}}})
    c = r['choices'][0]['message'].get('content') if st == 200 else None
    try:
        v = json.loads(c)
        ok = isinstance(v, dict) and isinstance(v.get('ok'), bool) and isinstance(v.get('n'), int)
    except (TypeError, ValueError):
        ok = False
    check('response_format json_schema: JSON content after the harmony header', st == 200 and ok and no_marker(c) and
          r['choices'][0]['finish_reason'] == 'stop', r)

    history = USER + [{'role': 'assistant', 'content': None, 'tool_calls': [{'id': 'c1', 'type': 'function', 'function': {
        'name': 'get_weather', 'arguments': '{"city": "Paris"}'}}]}, {'role': 'tool', 'tool_call_id': 'c1', 'content': 'sunny'}]
    st, r = s.post('/apply-template', {'messages': history, 'tools': TOOLS})
    check('an OpenAI-style tool-call history renders (content null, arguments as a string)', st == 200 and
          'to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>' in r['prompt'], r)
    st, r = s.post('/v1/chat/completions', {'messages': history, 'tools': TOOLS, 'max_tokens': 4, 'temperature': 0})
    check('and runs', st == 200, r)

    # The CLI prints the same texts for the same greedy run: reasoning in <think>, then the answer.
    st, r = s.post('/v1/chat/completions', {'messages': [{'role': 'user', 'content': 'hi'}], 'temperature': 0,
                                            'max_tokens': 80, 'grammar': GRAMMAR})
    m = r['choices'][0]['message'] if st == 200 else {}
    gfile = os.path.join(model, 'harmony.gbnf')
    open(gfile, 'w').write(GRAMMAR)
    p = subprocess.run([MLXCEL, 'generate', '-m', model, '-t', '2', '--backend', 'cpu', '-p', 'hi', '--temp', '0',
                        '-n', '80', '--grammar', gfile], capture_output=True, timeout=300)
    out = p.stdout.decode('utf-8', 'replace')
    want = '<think>\n%s\n</think>\n\n%s\n' % (m.get('reasoning_content'), m.get('content'))
    check('mlxcel generate prints <think>reasoning</think> then the final channel, as the server answers',
          p.returncode == 0 and out == want, (out, want, p.stderr.decode()[-400:]))

    # --json-schema is answered as response_format is: the same (free) analysis, cut at the same length.
    st, r = s.post('/v1/chat/completions', {'messages': [{'role': 'user', 'content': 'hi'}], 'temperature': 0, 'max_tokens': 30,
                                            'response_format': {'type': 'json_schema', 'json_schema': {'name': 'x', 'schema': schema}}})
    m = r['choices'][0]['message'] if st == 200 else {}
    sfile = os.path.join(model, 'schema.json')
    json.dump(schema, open(sfile, 'w'))
    p = subprocess.run([MLXCEL, 'generate', '-m', model, '-t', '2', '--backend', 'cpu', '-p', 'hi', '--temp', '0',
                        '-n', '30', '--json-schema', sfile], capture_output=True, timeout=300)
    out = p.stdout.decode('utf-8', 'replace')
    want = '<think>\n%s\n</think>%s\n' % (m.get('reasoning_content'), '\n\n' + m['content'] if m.get('content') else '')
    check('mlxcel generate --json-schema follows the server\'s harmony JSON grammar', st == 200 and m.get('reasoning_content')
          and p.returncode == 0 and out == want, (out, want))

    # chat: the harmony prompt each turn, the previous answer in the history as a final message.
    p = subprocess.run([MLXCEL, 'chat', '-m', model, '-t', '2', '--backend', 'cpu', '--temp', '0', '-n', '6',
                        '--print-prompt'], input=b'hi\nagain\n', capture_output=True, timeout=300)
    err = p.stderr.decode('utf-8', 'replace')
    prompts = re.findall(r'--- prompt \(\d+ tokens\) ---\n(.*?)\n--- end of prompt ---', err, re.S)
    answers = [a for a in re.split(r'> ', p.stdout.decode('utf-8', 'replace')) if a.strip()]
    first = answers[0].rstrip('\n') if answers else None
    check('mlxcel chat: harmony prompts, the answer kept as a final message', p.returncode == 0 and len(prompts) == 2 and
          prompts[0].endswith('<|start|>user<|message|>hi<|end|><|start|>assistant') and first is not None and
          prompts[1].endswith('<|start|>user<|message|>hi<|end|><|start|>assistant<|channel|>final<|message|>' + first +
                              '<|end|><|start|>user<|message|>again<|end|><|start|>assistant'), (prompts, answers, err[-300:]))


if __name__ == '__main__':
    main()
