# SPDX-License-Identifier: MIT
# Bounded load test of mlxcel-server on loopback: starts the server on an ephemeral port, keeps
# --idle idle connections open, and runs --requests requests from --clients threads, a fixed mix of
# plain and streamed completions and chats, /health, bad requests (malformed JSON, wrong
# Content-Type) and clients that disconnect in the middle of a stream. It stops by itself and
# prints: requests, answers by status and kind, p50/p99 latency per kind, and the server's resident
# memory before and after each round (VmRSS; the same load is repeated so that growth from first
# use, such as thread arenas and KV pages, can be told from a leak). Usage:
#   python3 bench/server_load.py build/cpu/mlxcel-server [--requests 600] [--clients 8] [--idle 200]
import argparse
import json
import os
import socket
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict

ap = argparse.ArgumentParser()
ap.add_argument('server')
ap.add_argument('--requests', type=int, default=600)
ap.add_argument('--clients', type=int, default=8)
ap.add_argument('--idle', type=int, default=200)
ap.add_argument('--parallel', type=int, default=4)
ap.add_argument('--rounds', type=int, default=2, help='the same load this many times (memory after each)')
args = ap.parse_args()

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'tests', 'pylib'))
from live_server import LiveServer, link_demo_model  # noqa: E402

tmp = tempfile.mkdtemp()
model = os.path.join(tmp, 'model')
link_demo_model(model, tokenizer_config='tests/fixtures/qwen3_tokenizer_config.json')
srv = LiveServer([args.server, '-m', model, '--parallel', str(args.parallel), '--ctx', '1024'],
                 log=os.path.join(tmp, 'server.log'))
proc, port = srv.p, srv.port


def rss_kb():
    for line in open(f'/proc/{proc.pid}/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1])
    return 0


def exchange(data, disconnect_after=None, timeout=120):
    s = socket.create_connection(('127.0.0.1', port), timeout=timeout)
    try:
        s.sendall(data)
        buf = b''
        while True:
            k = s.recv(65536)
            if not k:
                break
            buf += k
            if disconnect_after and len(buf) >= disconnect_after:
                return 'disconnected'
        if not buf.startswith(b'HTTP/1.1 '):
            return 'no answer'
        return int(buf.split(b' ', 2)[1])
    except OSError as e:
        return type(e).__name__
    finally:
        s.close()


def post(path, body, ctype='application/json'):
    b = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (f'POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: {ctype}\r\n'
            f'Content-Length: {len(b)}\r\n\r\n').encode() + b


MIX = [
    ('completion', lambda: post('/v1/completions', {'prompt': 'Once upon a time', 'max_tokens': 16})),
    ('completion_stream', lambda: post('/v1/completions', {'prompt': 'The cat', 'max_tokens': 16, 'stream': True})),
    ('chat', lambda: post('/v1/chat/completions', {'messages': [{'role': 'user', 'content': 'Hi'}], 'max_tokens': 12,
                                                  'chat_template_kwargs': {'enable_thinking': False}})),
    ('chat_stream', lambda: post('/v1/chat/completions', {'messages': [{'role': 'user', 'content': 'Hello'}],
                                                         'max_tokens': 12, 'stream': True})),
    ('health', lambda: b'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'),
    ('bad_json', lambda: post('/v1/completions', b'{"prompt": ')),
    ('bad_type', lambda: post('/v1/completions', {'prompt': 'x'}, 'text/plain')),
    ('disconnect', lambda: post('/v1/completions', {'prompt': 'Count', 'max_tokens': 200, 'stream': True,
                                                    'ignore_eos': True})),
]

results = []  # (kind, status, seconds)
lock = threading.Lock()
counter = None


def worker():
    global counter
    while True:
        with lock:
            i = next(counter, None)
        if i is None:
            return
        kind, make = MIX[i % len(MIX)]
        t0 = time.time()
        st = exchange(make(), disconnect_after=600 if kind == 'disconnect' else None)
        with lock:
            results.append((kind, st, time.time() - t0))


time.sleep(1.0)
rss = [rss_kb()]
wall = 0
for r in range(args.rounds):
    counter = iter(range(args.requests))
    idle = [socket.create_connection(('127.0.0.1', port)) for _ in range(args.idle)]
    t_start = time.time()
    threads = [threading.Thread(target=worker) for _ in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall += time.time() - t_start
    for s in idle:
        s.close()
    time.sleep(2.0)
    rss.append(rss_kb())
health = exchange(b'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
rc = srv.stop(timeout=60)
text = srv.text()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else 0


by_kind = defaultdict(list)
for kind, st, dt in results:
    by_kind[kind].append((st, dt))
print(f'requests: {len(results)} ({args.rounds} rounds of {args.requests}) from {args.clients} clients with '
      f'{args.idle} idle connections open, {wall:.1f} s wall, server --parallel {args.parallel}')
print(f'answers by status: {dict(Counter(str(st) for _, st, _ in results))}')
print('| kind | n | statuses | p50 ms | p99 ms |')
print('|---|---|---|---|---|')
for kind, _ in MIX:
    rows = by_kind[kind]
    lat = [dt * 1000 for _, dt in rows]
    print(f'| {kind} | {len(rows)} | {dict(Counter(str(st) for st, _ in rows))} | {pct(lat, 50):.0f} | {pct(lat, 99):.0f} |')
print('server RSS (MiB): before ' + ', then after each round: '.join(f'{x / 1024:.1f}' for x in rss[:2]) +
      ''.join(f', {x / 1024:.1f}' for x in rss[2:]))
print(f'/health after the run: {health}; exit status after SIGTERM: {rc}; '
      f'sanitizer reports: {"yes" if "Sanitizer" in text or "runtime error" in text else "none"}')
