#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""`mlxcel chat` end to end on a copy of the demo model given the real Qwen3 chat template:
multi-turn answers with the KV cache reused across turns equal the answers computed from scratch
each turn; the cache really is reused; /reset; --print-prompt; Ctrl-C stops an answer without quitting.
usage: test_chat.py PATH/TO/mlxcel (from the repository root)"""
import os, select, shutil, signal, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'pylib'))
from checks import check, finish  # noqa: E402
from live_server import link_demo_model  # noqa: E402

MLXCEL = os.path.abspath(sys.argv[1])


def read_until(p, done, timeout):
    """Reads the child's stdout and stderr as they come until done(out, err) holds or timeout
    seconds pass; returns (out, err, done reached)."""
    out, err, end = b'', b'', time.time() + timeout
    while not done(out, err) and time.time() < end:
        ready, _, _ = select.select([p.stdout, p.stderr], [], [], 0.1)
        for f in ready:
            chunk = os.read(f.fileno(), 65536)
            if f is p.stdout:
                out += chunk
            else:
                err += chunk
    return out, err, done(out, err)


tmp = tempfile.mkdtemp()
model = os.path.join(tmp, 'demo-chat')
link_demo_model(model, tokenizer_config='tests/fixtures/qwen3_tokenizer_config.json')

script = 'Hello there\nTell me about the city.\nAnd the river?\n/reset\nHello there\n/exit\n'
args = [MLXCEL, 'chat', '-m', model, '-n', '24', '--temp', '0']
env = dict(os.environ, MLXCEL_CHAT_DEBUG='1')
a = subprocess.run(args, input=script.encode(), capture_output=True, timeout=300, env=env)
b = subprocess.run(args + ['--no-prefix-cache'], input=script.encode(), capture_output=True, timeout=300, env=env)
ta, tb = a.stdout.decode(), b.stdout.decode()
answers = ta.split('> ')[1:-1]  # the text after each prompt; the last prompt read /exit
check('chat runs and exits on /exit', a.returncode == 0 and b.returncode == 0, a.stderr.decode()[-500:])
check('three turns, a reset and one more turn', len(answers) == 5 and 'conversation cleared' in answers[3], repr(answers))
check('answers with the reused cache equal answers recomputed from scratch', ta == tb, f'{ta!r}\nvs\n{tb!r}')
check('first answer after /reset equals the first answer', len(answers) == 5 and answers[0] == answers[4], repr(answers))
reuse = [l for l in a.stderr.decode().splitlines() if l.startswith('(reusing')]
check('later turns reuse the cached prefix', len(reuse) == 4 and reuse[0].startswith('(reusing 0 ') and
      not reuse[1].startswith('(reusing 0 ') and not reuse[2].startswith('(reusing 0 '), repr(reuse))

# --print-prompt shows each turn's rendered prompt (the second turn holds the first exchange).
c = subprocess.run(args + ['--print-prompt'], input=b'Hello there\nAnd the river?\n/exit\n', capture_output=True, timeout=300)
prompts = c.stderr.decode().split('--- prompt (')[1:]
check('--print-prompt prints each turn\'s prompt', len(prompts) == 2 and
      '<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n' in prompts[0] and
      '<|im_start|>user\nAnd the river?<|im_end|>\n<|im_start|>assistant\n' in prompts[1] and
      'Hello there' in prompts[1] and all('--- end of prompt ---' in p for p in prompts), repr(prompts))

# Ctrl-C stops the current answer; the chat goes on. (Temperature 5 makes the answer a long run
# of random tokens, so it is still going when the signal comes.) The signal is sent once the
# answer is streaming (40 bytes after the prompt), and the chat must then say "(stopped)" and stay
# alive; no fixed sleeps.
p = subprocess.Popen([MLXCEL, 'chat', '-m', model, '-n', '100000', '--ctx', '4096', '--temp', '5', '--seed', '1'],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
p.stdin.write(b'Write a very long story about the sea.\n')
p.stdin.flush()
out1, err1, streaming = read_until(p, lambda o, e: len(o) >= len(b'> ') + 40, 120)
p.send_signal(signal.SIGINT)
out2, err2, stopped = read_until(p, lambda o, e: b'(stopped)' in e, 60)
alive = p.poll() is None
out, err = p.communicate(b'/exit\n', timeout=60)
err = err1 + err2 + err
check('Ctrl-C stops the answer without quitting', streaming and stopped and alive and p.returncode == 0,
      f'streaming={streaming} stopped={stopped} alive={alive} rc={p.returncode} err={err[-300:]!r}')
shutil.rmtree(tmp)
finish()
