# SPDX-License-Identifier: MIT
# Writes the seed corpora of the fuzz targets into fuzz/corpus/<target>/ from the repository's own
# fixtures and small hand-made inputs. Run from the repository root; the output is checked in.
import json
import os
import struct

OUT = 'fuzz/corpus'


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data if isinstance(data, bytes) else data.encode('utf-8'))


# safetensors: small files with each dtype the loader knows, quantized triples, metadata, shards.
def st(tensors, meta=None):
    header, blob = {}, b''
    for name, dtype, shape, size in tensors:
        header[name] = {'dtype': dtype, 'shape': shape, 'data_offsets': [len(blob), len(blob) + size]}
        blob += bytes((i * 7) & 0xFF for i in range(size))
    if meta:
        header['__metadata__'] = meta
    h = json.dumps(header).encode()
    h += b' ' * (-len(h) % 8)
    return struct.pack('<Q', len(h)) + h + blob


put('safetensors', 'float', st([('a.weight', 'F32', [2, 3], 24), ('b', 'BF16', [4], 8), ('c', 'F16', [1, 1, 2], 4)],
                              {'format': 'mlx'}))
put('safetensors', 'quant', st([('m.q_proj.weight', 'U32', [4, 2], 32), ('m.q_proj.scales', 'BF16', [4, 1], 8),
                                ('m.q_proj.biases', 'BF16', [4, 1], 8)]))
put('safetensors', 'ints', st([('i8', 'I8', [3], 3), ('u8', 'U8', [5], 5), ('i32', 'I32', [2], 8), ('i64', 'I64', [1], 8),
                               ('f64', 'F64', [1], 8), ('bool', 'BOOL', [2], 2)]))
put('safetensors', 'empty', st([]))
put('safetensors', 'scalar', st([('s', 'F32', [], 4), ('z', 'F32', [0, 4], 0)]))

# config.json: every fixture's config (quantization blocks and per-module overrides), then a
# generation_config after a NUL byte.
fix = 'tests/fixtures/models'
for m in sorted(os.listdir(fix)):
    p = os.path.join(fix, m, 'config.json')
    if os.path.exists(p):
        put('config', m, open(p, 'rb').read())
cfg = json.load(open('models/qwen3-demo-44m-4bit/config.json'))
cfg['quantization'] = {'group_size': 64, 'bits': 4, 'model.layers.0.mlp.down_proj': {'group_size': 32, 'bits': 8},
                       'lm_head': False, 'model.embed_tokens': {'group_size': 64, 'bits': 6, 'mode': 'affine'}}
put('config', 'overrides', json.dumps(cfg))
put('config', 'with_generation', json.dumps(cfg) + '\0' + json.dumps({'eos_token_id': [1, 2], 'temperature': 0.6}))

# tokenizer.json: small hand-made byte-level BPE tokenizers with added tokens, normalizers,
# pre-tokenizers and decoders of the kinds the loader supports.
def byte_char(b):
    printable = lambda x: (33 <= x <= 126) or (0xA1 <= x <= 0xAC) or x >= 0xAE
    if printable(b):
        return chr(b)
    return chr(256 + sum(1 for x in range(b) if not printable(x)))


vocab = {byte_char(b): b for b in range(256)}
for i, t in enumerate(['he', 'll', 'hell', 'hello', '\u0120h', '\u0120hello']):
    vocab[t] = 256 + i
merges = ['h e', 'l l', 'he ll', 'hell o', '\u0120 h', '\u0120h ello']
vocab['ello'] = 262
base = {
    'version': '1.0',
    'added_tokens': [{'id': 300, 'content': '<|im_end|>', 'special': True, 'single_word': False, 'lstrip': False,
                      'rstrip': False, 'normalized': False},
                     {'id': 301, 'content': '<think>', 'special': False, 'single_word': False, 'lstrip': False,
                      'rstrip': False, 'normalized': False}],
    'normalizer': {'type': 'NFC'},
    'pre_tokenizer': {'type': 'Sequence', 'pretokenizers': [
        {'type': 'Split', 'pattern': {'Regex': "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
         'behavior': 'Isolated', 'invert': False},
        {'type': 'ByteLevel', 'add_prefix_space': False, 'trim_offsets': False, 'use_regex': False}]},
    'decoder': {'type': 'ByteLevel', 'add_prefix_space': True, 'trim_offsets': True, 'use_regex': True},
    'model': {'type': 'BPE', 'dropout': None, 'unk_token': None, 'continuing_subword_prefix': '',
              'end_of_word_suffix': '', 'fuse_unk': False, 'byte_fallback': False, 'ignore_merges': False,
              'vocab': vocab, 'merges': merges},
}
put('tokenizer_load', 'bytelevel', json.dumps(base))
b2 = json.loads(json.dumps(base))
b2['model']['merges'] = [m.split(' ') for m in b2['model']['merges']]
b2['model']['ignore_merges'] = True
b2['normalizer'] = None
put('tokenizer_load', 'pair_merges', json.dumps(b2))
b3 = json.loads(json.dumps(base))
b3['pre_tokenizer'] = {'type': 'ByteLevel', 'add_prefix_space': True, 'trim_offsets': True, 'use_regex': True}
b3['decoder'] = {'type': 'Sequence', 'decoders': [{'type': 'ByteLevel'}]}
put('tokenizer_load', 'prefix_space', json.dumps(b3))
put('tokenizer_load', 'minimal', '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}}')

# tokenizer codec: texts (ASCII, multibyte, invalid UTF-8, special tokens) and id sequences.
for i, t in enumerate([b'Hello, world!', 'caf\u00e9 \u65e5\u672c\u8a9e \U0001F600'.encode(), b'\xff\xfe\xc3(\xe2\x82',
                       b'<|im_start|>user\nHi<|im_end|>\n<think>\n</think>', b'   \t\n\n  x', b'12345 67.89e10']):
    put('tokenizer_codec', f'text{i}', t)
put('tokenizer_codec', 'ids', struct.pack('<8i', 9707, 11, 1879, 0, 151645, 151667, -1, 1 << 30))

# Jinja: the chat templates of the fixtures with their own contexts, and small templates that use
# each construct.
cases = json.load(open('tests/fixtures/chat_cases.json'))
tpl = cases['template']
for i, c in enumerate(cases['cases'][:4]):
    ctx = dict(c.get('kwargs') or {}, messages=c['messages'], add_generation_prompt=c['add_generation_prompt'])
    put('jinja', f'qwen3_{i}', tpl + '\0' + json.dumps(ctx))
for i, t in enumerate([
        '{% for m in messages %}{{ m.role | upper }}: {{ m.content | trim }}\n{% endfor %}',
        '{% set ns = namespace(x=0) %}{% for i in range(5) %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}',
        '{% macro f(a, b=2) %}{{ a * b }}{% endmacro %}{{ f(3) }} {{ f(a=1, b=4) }}',
        '{{ "a,b,c".split(",") | join("-") }} {{ [3,1,2] | sort | list }} {{ {"k": 1} | tojson }}',
        '{% if messages[0].role == "system" %}{{ messages[0].content[:3] }}{% else %}{{ raise_exception("no") }}{% endif %}',
        '{%- for m in messages -%}{%- if loop.first -%}{{ bos_token }}{%- endif -%}{{ m.content }}{%- if not loop.last -%}|{%- endif -%}{%- endfor -%}',
        '{{ "x" ~ 1 ~ none ~ true }} {{ 7 // 2 }} {{ 2 ** 10 }} {{ "%s-%d" % ("a", 3) if false else "b" }}',
        '{% filter upper %}hello {{ "world" }}{% endfilter %}{% raw %}{{ not parsed }}{% endraw %}',
]):
    put('jinja', f'construct{i}', t)

# Request bodies (chat and completion fields, good and bad).
for i, b in enumerate([
        {'model': 'x', 'messages': [{'role': 'user', 'content': 'Hi'}], 'max_tokens': 5, 'temperature': 0.7, 'top_p': 0.9,
         'stream': True, 'stream_options': {'include_usage': True}, 'stop': ['\n', 'END'], 'seed': 1},
        {'messages': [{'role': 'system', 'content': [{'type': 'text', 'text': 'a'}, {'type': 'text', 'text': 'b'}]},
                      {'role': 'assistant', 'content': None, 'tool_calls': [{'type': 'function', 'function': {
                          'name': 'f', 'arguments': '{"x": 1}'}}]}, {'role': 'tool', 'content': '42'}],
         'tools': [{'type': 'function', 'function': {'name': 'f', 'parameters': {'type': 'object'}}}],
         'logprobs': True, 'top_logprobs': 3, 'chat_template_kwargs': {'enable_thinking': False}},
        {'prompt': 'Once upon', 'max_tokens': 16, 'logprobs': 2, 'stop': 'x', 'presence_penalty': 0.5,
         'frequency_penalty': -0.5, 'repetition_penalty': 1.1, 'min_p': 0.05, 'top_k': 40, 'ignore_eos': True},
        {'prompt': [1, 2, 3, 151645], 'max_tokens': None, 'n': 1, 'echo': False},
        {'prompt': 'x', 'n': 2, 'temperature': 'hot', 'max_tokens': -3},
]):
    put('request', f'body{i}', json.dumps(b))

# gpt-oss (harmony): the template with two of its fixture contexts, and output-stage inputs (the
# first byte's bit 5 selects harmony, bit 2 tools; the second byte the piece size).
harmony = json.load(open('tests/fixtures/gpt_oss_chat_cases.json'))
harmony_tpl = open('tests/fixtures/gpt_oss_chat_template.jinja').read()
for i in (6, 8):
    c = harmony['cases'][i]
    ctx = dict(c.get('kwargs') or {}, messages=c['messages'], add_generation_prompt=c['add_generation_prompt'])
    put('jinja', f'gpt_oss_{i}', harmony_tpl + '\0' + json.dumps(ctx))
for i, (opts, step, text) in enumerate([
        (0x24, 3, '<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary '
                  'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'),
        (0x20, 1, '<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>Hi!<|return|>'),
        (0x24, 5, ' to=functions.f<|channel|>commentary json<|message|>{broken<|start|>assistant<|channel|>final<|message|>x <|en'),
]):
    put('output', f'harmony{i}', bytes([opts, step]) + text.encode())

# grammar: GBNF texts and JSON schemas (an input starting with '{'), the shapes the schema suite
# and the grammar tests use.
for i, g in enumerate([
        'root ::= "(" [0-9]{1,3} ( "," [0-9]{1,3} )* ")"\n',
        'root ::= word ( " " word ){0,4} "."\nword ::= [a-z]{1,8}\n',
        'root ::= ( "yes" | "no" ) "!"?\n',
        'root ::= "{" ws pair ( "," ws pair )* ws "}"\npair ::= [a-z]+ ":" ws ( [0-9]{1,4} | "\'" [^\']* "\'" )\n'
        'ws ::= [ \\n]*\n',
        'root ::= "é" [α-ω]* "漢" # comment\n',
        'root ::= a\na ::= b | "x"\nb ::= "(" a ")" .\n',
]):
    put('grammar', f'gbnf{i}', g)
STR = {'type': 'string', 'maxLength': 24}
for i, s in enumerate([
        {'type': 'object', 'properties': {'name': STR, 'age': {'type': 'integer', 'minimum': 0, 'maximum': 120}},
         'required': ['name', 'age']},
        {'type': 'array', 'items': {'type': 'integer', 'minimum': -50, 'maximum': 50}, 'minItems': 1, 'maxItems': 5},
        {'anyOf': [{'type': 'number'}, {'type': 'string', 'pattern': '^(yes|no|ma+ybe)$'}, {'type': 'null'}]},
        {'enum': [1, 'two', None, True, {'a': 1}]},
        {'$defs': {'node': {'type': 'object', 'properties': {
            'v': {'type': 'integer', 'exclusiveMinimum': 0, 'maximum': 9},
            'kids': {'type': 'array', 'maxItems': 2, 'items': {'$ref': '#/$defs/node'}}}, 'required': ['v']}},
         '$ref': '#/$defs/node'},
        {'type': 'object', 'properties': {'when': {'type': 'string', 'format': 'date-time'},
                                          'id': {'type': 'string', 'format': 'uuid'}},
         'additionalProperties': {'type': 'boolean'}},
        {'type': ['string', 'null'], 'minLength': 2, 'maxLength': 10},
]):
    put('grammar', f'schema{i}', json.dumps(s))
