#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Server throughput with and without constrained decoding at the same concurrency: starts
# mlxcel-server (--parallel P), then alternates rounds of C concurrent completions, unconstrained
# (ignore_eos, so every request generates max_tokens) and constrained by a JSON schema whose
# answers cannot end before max_tokens either (an array of at least 1000 short strings), after a
# warm-up of each. Reports generated tokens per second of wall time per round, the medians, and the
# median of the per-round costs (each constrained round against the plain round just before it),
# and the server's CPU time per generated token (less disturbed than wall time by other load on a
# shared machine).
# usage: constrained_bench.py PATH/TO/mlxcel-server [-m MODEL] [--parallel 4] [--clients 4]
#        [--tokens 64] [--rounds 5] [--temp 0] [--schema strings|objects] [--backend cuda]
import argparse
import json
import os
import statistics
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "pylib"))
from live_server import LiveServer  # noqa: E402

# minItems keeps every answer going to max_tokens, as ignore_eos does for the plain requests.
# "strings": short strings only (few parser states); "objects": records with a bounded string, an
# integer range and an enum list (many more states: keys, digits, bounds).
SCHEMAS = {
    "strings": {"type": "array", "items": {"type": "string", "maxLength": 24}, "minItems": 1000},
    "objects": {"type": "array", "minItems": 1000, "items": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "maxItems": 3, "items": {"enum": ["red", "green", "blue"]}}},
        "required": ["name", "age", "tags"]}},
}


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def cpu_seconds(pid):
    """User + system CPU seconds of a process so far (all its threads)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def round_trip(url, clients, body):
    out = [None] * clients
    def one(i):
        b = dict(body, seed=i + 1)
        out[i] = post(url, b)
    t0 = time.time()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.time() - t0
    tokens = sum(r["usage"]["completion_tokens"] for r in out)
    return tokens / dt, tokens


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("-m", default="models/qwen3-demo-44m-4bit")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--temp", type=float, default=0.0)
    ap.add_argument("--schema", choices=sorted(SCHEMAS), default="strings")
    ap.add_argument("--backend", help="passed to the server as --backend (default: the server's choice)")
    a = ap.parse_args()
    cmd = [a.server, "-m", a.m, "--parallel", str(a.parallel), "--ctx", "1024"]
    if a.backend:
        cmd += ["--backend", a.backend]
    srv = LiveServer(cmd, start_timeout=600)  # a large model may take minutes to load
    proc, port = srv.p, srv.port
    url = "http://127.0.0.1:%d/v1/completions" % port
    base = {"prompt": "List some words as JSON:", "max_tokens": a.tokens, "temperature": a.temp}
    plain = dict(base, ignore_eos=True)
    constrained = dict(base, response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": SCHEMAS[a.schema]}})
    try:
        round_trip(url, a.clients, plain)
        round_trip(url, a.clients, constrained)
        rates = {"plain": [], "constrained": []}
        cpu = {"plain": [], "constrained": []}  # server CPU milliseconds per generated token
        for r in range(a.rounds):
            for name, body in (("plain", plain), ("constrained", constrained)):
                c0 = cpu_seconds(proc.pid)
                rate, tokens = round_trip(url, a.clients, body)
                ms = 1000 * (cpu_seconds(proc.pid) - c0) / tokens
                rates[name].append(rate)
                cpu[name].append(ms)
                print("round %d %-11s %6.1f tok/s, %.2f CPU ms/token (%d tokens)" % (r, name, rate, ms, tokens), flush=True)
        mp, mc = statistics.median(rates["plain"]), statistics.median(rates["constrained"])
        paired = statistics.median(1 - c / p for p, c in zip(rates["plain"], rates["constrained"]))
        cp, cc = statistics.median(cpu["plain"]), statistics.median(cpu["constrained"])
        print("median: plain %.1f tok/s, constrained %.1f tok/s, cost %.1f%% (median of per-round costs %.1f%%); "
              "CPU per token: plain %.2f ms, constrained %.2f ms, cost %.1f%%" % (
            mp, mc, 100 * (1 - mc / mp), 100 * paired, cp, cc, 100 * (cc / cp - 1)))
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
