#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Held-out perplexity of the demo model: must reproduce reference.json's heldout_ppl_q4g64
(3092.745, transformers in float32 on the dequantized 4-bit weights) within 1e-5 relative on the
CPU (float32: it measures ~3e-7), over the same 65,081 scored tokens.
usage: test_perplexity.py PATH/TO/mlxcel (from the repository root)"""
import json, re, subprocess, sys

ref = json.load(open('models/qwen3-demo-44m-4bit/reference.json'))
p = subprocess.run([sys.argv[1], 'perplexity', '-f', 'tests/fixtures/heldout.txt', '--ctx', '512', '--backend', 'cpu'],
                   capture_output=True, timeout=1800)
out = p.stdout.decode() + p.stderr.decode()
print(out)
m = re.search(r'Perplexity: ([0-9.]+) over ([0-9]+) tokens', out)
ok = p.returncode == 0 and m is not None
if ok:
    ppl, n = float(m.group(1)), int(m.group(2))
    want = ref['heldout_ppl_q4g64']
    rel = abs(ppl - want) / want
    ok = rel < 1e-5 and n == ref['heldout_tokens']
    print(f'perplexity {ppl} vs reference {want:.4f} (relative {rel:.1e}, bound 1e-5) over {n} tokens '
          f'(reference {ref["heldout_tokens"]})')
print(f'{int(ok)} passed, {int(not ok)} failed')
sys.exit(0 if ok else 1)
