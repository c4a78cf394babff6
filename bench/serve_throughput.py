#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Load generator for a running mlxcel-server (or any OpenAI-compatible /v1/completions server).

N concurrent streams each send `--rounds` streaming completions one after another. Prompts are
token-id lists (`--prompt-tokens` random ids, a different prompt per request: drawn from
`--prompt-seed` and the level, a fresh seed per run unless given, so a later run against the same
server does not find its prompts in the prefix cache), and every request
asks for exactly `--max-tokens` tokens (ignore_eos), so lengths do not depend on the weights.
Prints, per concurrency: aggregate completion tokens per second (all tokens / wall time), time to
first token and inter-token latency (time between streamed events; each carries one token unless
the detokenizer held text back) as p50 / p99, and a JSON line for scripts. When the server has
mlxcel's /metrics, each level also prints where the server's time went during it: engine steps, the
seconds of each step phase, and the busy share of the level's wall time (the rest is the server
waiting for requests, HTTP and the client).

--shared-prefix N measures prefix reuse instead: one request with an N-token prompt, then a second
whose prompt is the same N tokens plus 16 more; prints both times to first token.

Standard library only.
usage: bench/serve_throughput.py --url http://127.0.0.1:8080 [-c 1,8,32] [--prompt-tokens 32] [--max-tokens 128]
                     [--temperature 0] [--top-p 1] [--rounds 2] [--prompt-seed S] [--shared-prefix N]"""
import argparse, http.client, json, random, sys, threading, time, urllib.parse


def pct(xs, p):
    if not xs:
        return float('nan')
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


def stream_completion(url, body, timeout=600):
    """Sends one streaming completion; returns (ttft, [event times], completion tokens, error)."""
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    body = dict(body, stream=True, stream_options={'include_usage': True})
    t0 = time.perf_counter()
    c.request('POST', '/v1/completions', json.dumps(body), {'Content-Type': 'application/json'})
    r = c.getresponse()
    if r.status != 200:
        err = r.read()[:300]
        c.close()
        return None, [], 0, f'HTTP {r.status}: {err!r}'
    times, tokens, ttft = [], 0, None
    for raw in r:
        line = raw.strip()
        if not line.startswith(b'data:'):
            continue
        data = line[5:].strip()
        if data == b'[DONE]':
            break
        ev = json.loads(data)
        if ev.get('usage'):
            tokens = ev['usage'].get('completion_tokens', tokens)
        for ch in ev.get('choices', []):
            if ch.get('text'):
                now = time.perf_counter() - t0
                if ttft is None:
                    ttft = now
                times.append(now)
    c.close()
    return ttft, times, tokens, None


SERVER_PHASES = ('steps_total', 'step_prepare_seconds_total', 'step_forward_seconds_total',
                 'step_host_choose_seconds_total', 'step_finish_seconds_total',
                 'scheduler_between_steps_seconds_total', 'scheduler_upkeep_seconds_total', 'prompt_tokens_total',
                 'generated_tokens_total')


# The parts of the upkeep between steps (servers before them have none: printed when present).
UPKEEP_PARTS = (('admit', 'scheduler_admit_seconds_total'), ('release', 'scheduler_release_seconds_total'),
                ('cpu', 'scheduler_upkeep_cpu_seconds_total'), ('preempted', 'scheduler_upkeep_preemptions_total'),
                ('blocked', 'scheduler_upkeep_blocks_total'), ('lock wait', 'scheduler_upkeep_lock_wait_seconds_total'),
                ('step lock wait', 'scheduler_step_lock_wait_seconds_total'))

# How the steps ran (servers before them have none: printed when present): decode steps (no prompt
# tokens), their rows and forward time; the step plans by outcome (graph replayed, recorded, run
# directly) and the plans built; the device time of the plans (MLXCEL_GPU_PLAN_TIMES=1 on the
# server, else 0); the scheduler thread's context switches during steps.
STEP_PARTS = ('decode_steps_total', 'decode_rows_total', 'step_decode_forward_seconds_total',
              'gpu_graph_replays_total', 'gpu_graph_recordings_total', 'plan_direct_runs_total', 'plans_built_total',
              'plans_evicted_total', 'gpu_plan_device_seconds_total', 'gpu_decode_device_seconds_total',
              'padding_tokens_total', 'scheduler_step_preemptions_total', 'scheduler_step_blocks_total')


def server_counters(url):
    """mlxcel's cumulative step counters from /metrics, or None when the server has none."""
    u = urllib.parse.urlparse(url)
    try:
        c = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=10)
        c.request('GET', '/metrics')
        r = c.getresponse()
        text = r.read().decode('utf-8', 'replace') if r.status == 200 else ''
        c.close()
    except OSError:
        return None
    vals = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].startswith('mlxcel_'):
            vals[parts[0][7:]] = float(parts[1])
    return vals if all(k in vals for k in SERVER_PHASES) else None


def run_level(args, conc, vocab_lo, vocab_hi):
    rng = random.Random(f'{args.prompt_seed}:{conc}')
    lock = threading.Lock()
    ttfts, itls, total_tokens, errors = [], [], [0], []

    def worker(k):
        for _ in range(args.rounds):
            with lock:
                prompt = [rng.randrange(vocab_lo, vocab_hi) for _ in range(args.prompt_tokens)]
            body = {'prompt': prompt, 'max_tokens': args.max_tokens, 'ignore_eos': True,
                    'temperature': args.temperature}
            if args.top_p < 1:
                body['top_p'] = args.top_p
            if args.temperature > 0:
                body['seed'] = k
            ttft, times, tokens, err = stream_completion(args.url, body)
            with lock:
                if err:
                    errors.append(err)
                    continue
                ttfts.append(ttft)
                itls.extend(b - a for a, b in zip(times, times[1:]))
                total_tokens[0] += tokens

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(conc)]
    before = server_counters(args.url)
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    after = server_counters(args.url)
    res = {'concurrency': conc, 'requests': len(ttfts), 'errors': len(errors), 'tokens': total_tokens[0],
           'wall_s': round(wall, 3), 'tok_per_s': round(total_tokens[0] / wall, 1) if wall > 0 else 0,
           'ttft_p50_ms': round(1000 * pct(ttfts, 50), 1), 'ttft_p99_ms': round(1000 * pct(ttfts, 99), 1),
           'itl_p50_ms': round(1000 * pct(itls, 50), 2), 'itl_p99_ms': round(1000 * pct(itls, 99), 2),
           'temperature': args.temperature, 'top_p': args.top_p, 'prompt_tokens': args.prompt_tokens,
           'max_tokens': args.max_tokens}
    if before and after:
        d = {k: after[k] - before[k] for k in SERVER_PHASES}
        busy = sum(d[k] for k in SERVER_PHASES if k.startswith('step_') and k.endswith('_seconds_total'))
        res['server'] = {'steps': int(d['steps_total']), 'prompt_tokens': int(d['prompt_tokens_total']),
                         'generated_tokens': int(d['generated_tokens_total']),
                         'prepare_s': round(d['step_prepare_seconds_total'], 4),
                         'forward_s': round(d['step_forward_seconds_total'], 4),
                         'host_choose_s': round(d['step_host_choose_seconds_total'], 4),
                         'finish_s': round(d['step_finish_seconds_total'], 4),
                         'between_steps_s': round(d['scheduler_between_steps_seconds_total'], 4),
                         'upkeep_s': round(d['scheduler_upkeep_seconds_total'], 4),
                         'busy_share': round(busy / wall, 3) if wall > 0 else 0}
        res['server']['upkeep_parts'] = {name: round(after[k] - before[k], 4) for name, k in UPKEEP_PARTS
                                         if k in before and k in after}
        if all(k in before and k in after for k in STEP_PARTS):
            res['server']['step_parts'] = {k.replace('_total', ''): round(after[k] - before[k], 4) for k in STEP_PARTS}
    if errors:
        print('errors (first): ' + errors[0], file=sys.stderr)
    return res


def shared_prefix(args, vocab_lo, vocab_hi):
    rng = random.Random(f'{args.prompt_seed}:prefix')
    prefix = [rng.randrange(vocab_lo, vocab_hi) for _ in range(args.shared_prefix)]
    out = {}
    for name, prompt in (('first', prefix), ('second', prefix + [rng.randrange(vocab_lo, vocab_hi) for _ in range(16)])):
        ttft, _, _, err = stream_completion(args.url, {'prompt': prompt, 'max_tokens': 4, 'ignore_eos': True,
                                                       'temperature': 0})
        if err:
            sys.exit(f'{name} request failed: {err}')
        out[name + '_ttft_ms'] = round(1000 * ttft, 1)
    out['ratio'] = round(out['second_ttft_ms'] / out['first_ttft_ms'], 3)
    out['prefix_tokens'] = args.shared_prefix
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--url', default='http://127.0.0.1:8080')
    ap.add_argument('-c', '--concurrency', default='1,8')
    ap.add_argument('--prompt-tokens', type=int, default=32)
    ap.add_argument('--max-tokens', type=int, default=128)
    ap.add_argument('--temperature', type=float, default=0.0)
    ap.add_argument('--top-p', type=float, default=1.0)
    ap.add_argument('--rounds', type=int, default=2)
    ap.add_argument('--shared-prefix', type=int, default=0)
    ap.add_argument('--prompt-seed', type=int, default=None,
                    help='seed of the prompts (default: a fresh one per run, printed)')
    ap.add_argument('--vocab-range', default='1000,30000', help='prompt token ids are drawn from [lo, hi)')
    args = ap.parse_args()
    lo, hi = (int(x) for x in args.vocab_range.split(','))
    if args.prompt_seed is None:
        args.prompt_seed = random.SystemRandom().randrange(1 << 31)
    if args.shared_prefix > 0:
        res = shared_prefix(args, lo, hi)
        print(f"shared prefix {res['prefix_tokens']} tokens: first TTFT {res['first_ttft_ms']} ms, "
              f"second {res['second_ttft_ms']} ms ({100 * res['ratio']:.1f}%)")
        print('JSON ' + json.dumps(res))
        return
    for conc in [int(x) for x in args.concurrency.split(',')]:
        res = run_level(args, conc, lo, hi)
        res['prompt_seed'] = args.prompt_seed
        print(f"c={conc:3d} temp={args.temperature} top_p={args.top_p}: {res['tok_per_s']:8.1f} tok/s  "
              f"TTFT p50 {res['ttft_p50_ms']} ms p99 {res['ttft_p99_ms']} ms  "
              f"ITL p50 {res['itl_p50_ms']} ms p99 {res['itl_p99_ms']} ms  ({res['requests']} requests, "
              f"{res['errors']} errors, {res['wall_s']} s)")
        if 'server' in res:
            sv = res['server']
            print(f"      server: {sv['steps']} steps, forward {sv['forward_s']} s, prepare {sv['prepare_s']} s, "
                  f"host choice {sv['host_choose_s']} s, finish {sv['finish_s']} s, between steps "
                  f"{sv['between_steps_s']} s (upkeep {sv['upkeep_s']} s); busy {100 * sv['busy_share']:.1f}% of the wall time")
            if sv['upkeep_parts']:
                print('      upkeep: ' + ', '.join(f'{k} {v:g}' + ('' if k in ('preempted', 'blocked') else ' s')
                                               for k, v in sv['upkeep_parts'].items()))
            st = sv.get('step_parts')
            if st:
                ds = st['decode_steps'] or 1
                print(f"      decode steps: {st['decode_steps']:g} of {sv['steps']} ({st['decode_rows'] / ds:.1f} rows each, "
                      f"forward {1e3 * st['step_decode_forward_seconds'] / ds:.3f} ms each, device "
                      f"{1e3 * st['gpu_decode_device_seconds'] / ds:.3f} ms each); other steps: forward "
                      f"{1e3 * (sv['forward_s'] - st['step_decode_forward_seconds']) / max(1, sv['steps'] - st['decode_steps']):.3f} ms each")
                print(f"      plans: {st['gpu_graph_replays']:g} graph replays, {st['gpu_graph_recordings']:g} recordings, "
                      f"{st['plan_direct_runs']:g} direct runs; {st['plans_built']:g} built, {st['plans_evicted']:g} evicted; "
                      f"device {st['gpu_plan_device_seconds']:g} s; padding tokens {st['padding_tokens']:g}; scheduler "
                      f"switches in steps: {st['scheduler_step_preemptions']:g} preempted, {st['scheduler_step_blocks']:g} blocked")
        print('JSON ' + json.dumps(res))
        sys.stdout.flush()


if __name__ == '__main__':
    main()
