# SPDX-License-Identifier: MIT
# Server hardening tests against a live mlxcel-server on loopback (raw sockets where a client has
# to misbehave): more than 1,100 idle connections while /health still answers, the idle timeout,
# the connection limit's 503, UTF-8-safe replies (long multibyte model names, invalid bytes in
# paths), half-closed clients, JSON Content-Type (415), CORS preflights and origins, HEAD,
# conflicting Content-Length, encoded NUL in the path, over-long paths and headers, tool schemas whose
# $ref leads back to itself (400) or into their own $defs (resolved), and graceful
# shutdown (running requests finish; past --shutdown-timeout they end with an error; exit 0), and
# the memory estimate that refuses a context larger than memory at start-up.
# Usage: hardening.py MLXCEL_SERVER
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'pylib'))
from checks import check, finish  # noqa: E402
from live_server import LiveServer, link_demo_model  # noqa: E402

BIN = sys.argv[1]
ROOT = os.getcwd()


def make_model(d):
    link_demo_model(d, tokenizer_config=os.path.join(ROOT, 'tests/fixtures/qwen3_tokenizer_config.json'))


def start_server(model, log, *args):
    return LiveServer([BIN, '-m', model, *args], log=log)


def raw(port, data, shut_wr=False, timeout=30):
    """Sends bytes, returns (status, headers text, body bytes) of the whole reply (until close)."""
    s = socket.create_connection(('127.0.0.1', port), timeout=timeout)
    s.sendall(data)
    if shut_wr:
        s.shutdown(socket.SHUT_WR)
    buf = b''
    try:
        while True:
            k = s.recv(65536)
            if not k:
                break
            buf += k
            # One reply is enough: stop when a Content-Length body is complete.
            if b'\r\n\r\n' in buf:
                head, body = buf.split(b'\r\n\r\n', 1)
                m = re.search(rb'(?im)^content-length:\s*(\d+)', head)
                if m and len(body) >= int(m.group(1)):
                    break
    except socket.timeout:
        pass
    s.close()
    if b'\r\n\r\n' not in buf:
        return 0, '', buf
    head, body = buf.split(b'\r\n\r\n', 1)
    status = int(head.split(b' ', 2)[1])
    return status, head.decode('latin-1'), body


def req(port, method, path, body=None, headers=None, shut_wr=False):
    h = {'Host': '127.0.0.1', 'Connection': 'close'}
    if body is not None:
        body = body if isinstance(body, bytes) else json.dumps(body).encode()
        h['Content-Type'] = 'application/json'
        h['Content-Length'] = str(len(body))
    h.update(headers or {})
    lines = [f'{method} {path} HTTP/1.1'] + [f'{k}: {v}' for k, v in h.items() if v is not None]
    data = ('\r\n'.join(lines) + '\r\n\r\n').encode('latin-1') + (body or b'')
    return raw(port, data, shut_wr)


def json_error(body, code=None):
    try:
        d = json.loads(body.decode('utf-8'))
        e = d['error']
        return isinstance(e['message'], str) and (code is None or e['code'] == code)
    except Exception:
        return False


def sse_events(body):
    text = body.decode('utf-8')
    return [l[6:] for l in text.split('\n') if l.startswith('data: ')]


def dechunk(body):
    out, rest = b'', body
    while rest:
        line, _, rest = rest.partition(b'\r\n')
        n = int(line.split(b';')[0] or b'0', 16)
        if n == 0:
            break
        out += rest[:n]
        rest = rest[n + 2:]
    return out


tmp = tempfile.mkdtemp()
model = os.path.join(tmp, 'model')
make_model(model)

# --- many idle connections, then /health ------------------------------------------------------
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
want = min(hard, 4096) if hard != resource.RLIM_INFINITY else 4096
if soft < want:
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
N_IDLE = 1150
srv = start_server(model, os.path.join(tmp, 'a.log'), '--parallel', '2', '--ctx', '1024', '--conn-timeout', '60',
                   '--cors-origin', 'http://good.example')
idle = []
try:
    for i in range(N_IDLE):
        idle.append(socket.create_connection(('127.0.0.1', srv.port), timeout=10))
    time.sleep(1.0)
    st, _, body = req(srv.port, 'GET', '/health')
    check(f'/health answers with {N_IDLE} idle connections open', st == 200 and b'"ok"' in body, f'{st} {body[:200]!r}')
    st, _, body = req(srv.port, 'POST', '/v1/completions', {'prompt': 'Hi', 'max_tokens': 2})
    check(f'a completion is served with {N_IDLE} idle connections open', st == 200, f'{st} {body[:200]!r}')
finally:
    for s in idle:
        s.close()
check('no FD_SETSIZE complaint in the log', 'FD_SETSIZE' not in srv.text(), srv.text()[-500:])

# --- forced tool calls: each tool's parameters are a schema of their own -------------------------
def tool_call(params):
    return {'messages': [{'role': 'user', 'content': 'Hi'}], 'max_tokens': 40, 'temperature': 0,
            'tool_choice': 'required', 'tools': [{'type': 'function', 'function': {'name': 'f', 'parameters': params}}]}
st, _, body = req(srv.port, 'POST', '/v1/chat/completions',
                  tool_call({'anyOf': [{'$ref': '#'}, {'type': 'object'}]}))
check('a tool whose $ref leads back to itself is a 400 in the schema\'s terms',
      st == 400 and b'tools: json schema: a $ref leads back to itself' in body, f'{st} {body[:300]!r}')
st, _, body = req(srv.port, 'POST', '/v1/chat/completions',
                  tool_call({'type': 'object', 'properties': {'u': {'$ref': '#/$defs/u'}}, 'required': ['u'],
                             '$defs': {'u': {'enum': ['c', 'f']}}}))
answer = json.loads(body)['choices'][0]['message'] if st == 200 else {}
answer = (answer.get('content') or '') + json.dumps(answer.get('tool_calls') or '')
check('a tool\'s $ref to its own $defs resolves (the call follows it)',
      st == 200 and re.search(r'\\?"u\\?"\s*:\s*\\?"[cf]\\?"', answer), f'{st} {body[:300]!r}')

# --- UTF-8-safe replies --------------------------------------------------------------------------
name = 'a' * 254 + '\u00e9\u00e9'
st, _, body = req(srv.port, 'POST', '/v1/completions', {'prompt': 'Hi', 'max_tokens': 2, 'model': name})
ok = st == 200
try:
    d = json.loads(body.decode('utf-8'))
    ok = ok and name.startswith(d['model']) and len(d['model']) >= 254
except Exception as e:
    ok = False
check('a long multibyte model name is cut on a character boundary (plain)', ok, f'{st} {body[:300]!r}')
st, head, body = req(srv.port, 'POST', '/v1/completions',
                     {'prompt': 'Hi', 'max_tokens': 3, 'model': name, 'stream': True})
ev = sse_events(dechunk(body)) if 'chunked' in head.lower() else sse_events(body)
check('the same model name in a stream: chunks and [DONE]', st == 200 and len(ev) >= 2 and ev[-1] == '[DONE]' and
      all(json.loads(e)['model'] for e in ev[:-1]), f'{st} {ev[:3]}')
st, _, body = req(srv.port, 'GET', '/%ff')
check('GET /%ff: 404 JSON', st == 404 and json_error(body, 'not_found'), f'{st} {body[:200]!r}')
path = '/' + '\u00e9' * 700
st, _, body = req(srv.port, 'GET', path.encode('utf-8').decode('latin-1'))
check('a 1.4 KB path of multibyte characters: 404 JSON', st == 404 and json_error(body), f'{st} {body[:200]!r}')
st, _, body = req(srv.port, 'GET', '/' + '%e9' * 600)
check('a path of invalid UTF-8 bytes: 404 JSON', st == 404 and json_error(body), f'{st} {body[:200]!r}')

# --- half-closed client ---------------------------------------------------------------------------
st, _, body = req(srv.port, 'POST', '/v1/completions', {'prompt': 'Hi', 'max_tokens': 4}, shut_wr=True)
check('half-closed client gets its whole reply', st == 200 and b'text_completion' in body, f'{st} {body[:200]!r}')
st, head, body = req(srv.port, 'POST', '/v1/completions', {'prompt': 'Hi', 'max_tokens': 4, 'stream': True},
                     shut_wr=True)
check('half-closed client gets its whole stream', st == 200 and b'[DONE]' in body, f'{st} {body[-200:]!r}')

# --- content type, CORS, HEAD, framing, sizes -----------------------------------------------------
b = b'{"prompt":"Hi","max_tokens":1}'
st, _, body = req(srv.port, 'POST', '/v1/completions', b, {'Content-Type': 'text/plain'})
check('POST with Content-Type text/plain: 415', st == 415 and json_error(body, 'unsupported_media_type'), f'{st} {body!r}')
st, _, body = req(srv.port, 'POST', '/v1/completions', b, {'Content-Type': None})
check('POST without Content-Type: 415', st == 415 and json_error(body), f'{st} {body!r}')
st, _, body = req(srv.port, 'POST', '/v1/completions', b, {'Content-Type': 'application/json; charset=utf-8'})
check('application/json with a charset is accepted', st == 200, f'{st} {body[:200]!r}')
pre = {'Origin': 'http://evil.example', 'Access-Control-Request-Method': 'POST',
       'Access-Control-Request-Headers': 'content-type'}
st, head, body = req(srv.port, 'OPTIONS', '/v1/completions', None, pre)
check('preflight from an origin not allowed: 403, no CORS header',
      st == 403 and 'access-control-allow-origin' not in head.lower() and json_error(body), f'{st} {head}')
pre['Origin'] = 'http://good.example'
st, head, body = req(srv.port, 'OPTIONS', '/v1/completions', None, pre)
check('preflight from an allowed origin: 204 with the origin echoed',
      st == 204 and 'access-control-allow-origin: http://good.example' in head.lower(), f'{st} {head}')
st, head, body = req(srv.port, 'POST', '/v1/completions', b, {'Origin': 'http://evil.example'})
check('request from an origin not allowed: 403', st == 403 and json_error(body, 'origin_not_allowed'), f'{st} {body!r}')
st, head, body = req(srv.port, 'GET', '/health', None, {'Origin': 'http://good.example'})
check('request from an allowed origin carries Access-Control-Allow-Origin',
      st == 200 and 'access-control-allow-origin: http://good.example' in head.lower(), head)
st, head, body = req(srv.port, 'HEAD', '/health')
check('HEAD /health: 200 without a body', st == 200 and body == b'' and 'content-length' in head.lower(), f'{st} {head} {body!r}')
st, head, body = req(srv.port, 'HEAD', '/v1/models')
check('HEAD /v1/models: 200', st == 200 and body == b'', f'{st} {body!r}')
data = (b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 30\r\n'
        b'Content-Length: 5\r\nConnection: close\r\n\r\n' + b)
st, head, body = raw(srv.port, data)
check('two different Content-Length headers: 400 JSON', st == 400 and json_error(body, 'invalid_content_length'),
      f'{st} {body!r}')
st, _, body = req(srv.port, 'GET', '/health%00x')
check('/health%00x: 400 JSON', st == 400 and json_error(body, 'invalid_path'), f'{st} {body!r}')
st, _, body = req(srv.port, 'GET', '/' + 'a' * 10000)
check('a 10 KB path: 414 JSON', st == 414 and json_error(body), f'{st} {body[:200]!r}')
st, _, body = req(srv.port, 'GET', '/health', None, {f'X-Filler-{i}': 'y' * 1000 for i in range(20)})
check('20 KB of headers: 431 JSON', st == 431 and json_error(body), f'{st} {body[:200]!r}')
rc = srv.stop()
check('server exits 0 on SIGTERM', rc == 0, f'rc={rc} log={srv.text()[-800:]}')
for bad in ('AddressSanitizer', 'runtime error', 'LeakSanitizer'):
    check(f'no {bad} report', bad not in srv.text(), srv.text()[-2000:])

# --- idle timeout and the connection limit ---------------------------------------------------------
srv = start_server(model, os.path.join(tmp, 'b.log'), '--conn-timeout', '2', '--max-connections', '20')
s = socket.create_connection(('127.0.0.1', srv.port), timeout=15)
t0 = time.time()
try:
    gone = s.recv(1) == b''
except (socket.timeout, ConnectionResetError):
    gone = False
dt = time.time() - t0
check(f'an idle connection is closed after --conn-timeout ({dt:.1f} s)', gone and 1.5 <= dt <= 6, f'gone={gone} dt={dt}')
s.close()
s = socket.create_connection(('127.0.0.1', srv.port), timeout=15)
s.sendall(b'GET /health HTTP/1.1\r\nHost: x\r\n')  # headers never finished
t0 = time.time()
try:
    gone = s.recv(1) == b''
except (socket.timeout, ConnectionResetError):
    gone = True
dt = time.time() - t0
check(f'a request sent too slowly is dropped after --conn-timeout ({dt:.1f} s)', gone and dt <= 6, f'dt={dt}')
s.close()
time.sleep(0.3)
idle = [socket.create_connection(('127.0.0.1', srv.port), timeout=10) for _ in range(20)]
time.sleep(0.3)
st, head, body = req(srv.port, 'GET', '/health')
check('over --max-connections: 503 JSON too_many_connections', st == 503 and json_error(body, 'too_many_connections'),
      f'{st} {body[:200]!r}')
for s in idle:
    s.close()
time.sleep(0.5)
st, _, _ = req(srv.port, 'GET', '/health')
check('back under the limit: /health 200', st == 200, st)
srv.stop()


# --- graceful shutdown -------------------------------------------------------------------------------
def run_async(fn, *a):
    out = {}
    t = threading.Thread(target=lambda: out.setdefault('r', fn(*a)))
    t.start()
    return t, out


# A generous --shutdown-timeout: the sanitizer build on a loaded machine is many times slower.
srv = start_server(model, os.path.join(tmp, 'c.log'), '--parallel', '2', '--shutdown-timeout', '180')
short = {'prompt': 'Count', 'max_tokens': 24, 'ignore_eos': True}
t1, o1 = run_async(req, srv.port, 'POST', '/v1/completions', short)
t2, o2 = run_async(req, srv.port, 'POST', '/v1/completions', dict(short, stream=True))
time.sleep(0.5)
srv.p.send_signal(signal.SIGTERM)
time.sleep(0.3)
try:
    refused = req(srv.port, 'GET', '/health')[0] in (0, 503)
except OSError:
    refused = True
check('after SIGTERM new connections are refused', refused)
t1.join(240)
t2.join(240)
rc = srv.p.wait(240)
st, _, body = o1.get('r', (0, '', b''))
check('a running plain request finishes during the drain', st == 200 and
      json.loads(body)['usage']['completion_tokens'] == 24, f'{st} {body[:200]!r}')
st, head, body = o2.get('r', (0, '', b''))
body = dechunk(body) if 'chunked' in head.lower() else body
ev = sse_events(body)
last = json.loads(ev[-2]) if len(ev) >= 2 else {}
check('a running stream finishes during the drain', st == 200 and ev[-1:] == ['[DONE]'] and
      (last.get('choices') or [{}])[0].get('finish_reason') == 'length', f'{st} {ev[-3:]}')
check('exit status 0 after the drain', rc == 0, rc)

srv = start_server(model, os.path.join(tmp, 'd.log'), '--parallel', '2', '--ctx', '4096', '--shutdown-timeout', '1')
long = {'prompt': 'Count', 'max_tokens': 4000, 'ignore_eos': True}
t1, o1 = run_async(req, srv.port, 'POST', '/v1/completions', long)
t2, o2 = run_async(req, srv.port, 'POST', '/v1/completions', dict(long, stream=True))
time.sleep(1.0)
t0 = time.time()
srv.p.send_signal(signal.SIGTERM)
rc = srv.p.wait(60)
dt = time.time() - t0
t1.join(30)
t2.join(30)
st, _, body = o1.get('r', (0, '', b''))
check('past --shutdown-timeout a plain request ends with a 503 JSON error', st == 503 and json_error(body, 'shutting_down'),
      f'{st} {body[:200]!r}')
st, head, body = o2.get('r', (0, '', b''))
body = dechunk(body) if 'chunked' in head.lower() else body
ev = sse_events(body)
ok = st == 200 and len(ev) >= 2 and ev[-1] == '[DONE]'
ok = ok and json.loads(ev[-2]).get('error', {}).get('code') == 'shutting_down'
check('past --shutdown-timeout a stream ends with an error event and [DONE]', ok, f'{st} {ev[-3:]}')
check(f'exit status 0, within the timeout plus a moment ({dt:.1f} s)', rc == 0 and dt < 8, f'rc={rc} dt={dt}')
for log in ('b.log', 'c.log', 'd.log'):
    text = open(os.path.join(tmp, log)).read()
    check(f'no sanitizer report ({log})', 'Sanitizer' not in text and 'runtime error' not in text, text[-2000:])

# --- special tokens in message content --------------------------------------------------------------
def chat_prompt_tokens(port, content):
    st, _, body = req(port, 'POST', '/v1/chat/completions', {'messages': [{'role': 'user', 'content': content}],
                                                             'max_tokens': 1, 'temperature': 0})
    return json.loads(body)['usage']['prompt_tokens'] if st == 200 else -st


srv = start_server(model, os.path.join(tmp, 'e.log'))
n_plain_default = chat_prompt_tokens(srv.port, 'Hello there')
n_special_default = chat_prompt_tokens(srv.port, 'Hello<|im_end|>there')
srv.stop()
srv = start_server(model, os.path.join(tmp, 'f.log'), '--no-special-in-content')
n_plain_flag = chat_prompt_tokens(srv.port, 'Hello there')
n_special_flag = chat_prompt_tokens(srv.port, 'Hello<|im_end|>there')
n_marker_flag = chat_prompt_tokens(srv.port, 'Hello\ufdd0<|im_end|>\ufdd1there')
srv.stop()
check('content without special tokens: same prompt with and without --no-special-in-content',
      n_plain_default == n_plain_flag > 0, f'{n_plain_default} {n_plain_flag}')
check('by default <|im_end|> in content is one token; with the flag it is plain text (several tokens)',
      0 < n_special_default < n_special_flag, f'{n_special_default} {n_special_flag}')
check('marker characters written by the client do not change the guarded prompt', n_marker_flag == n_special_flag,
      f'{n_marker_flag} {n_special_flag}')

# --- memory estimate at start-up ------------------------------------------------------------------
# The default pool is sized from free memory, so ask for one larger than memory explicitly.
p = subprocess.run([BIN, '-m', model, '--port', '0', '--parallel', '256', '--ctx', '1048576', '--kv-size', '268435456'],
                   capture_output=True, timeout=120)
err = p.stderr.decode('utf-8', 'replace')
check('a KV cache larger than memory is refused at start-up with the numbers',
      p.returncode != 0 and 'not enough' in err and 'KV cache' in err and 'GiB is free' in err, f'rc={p.returncode} {err[-400:]}')

finish()
