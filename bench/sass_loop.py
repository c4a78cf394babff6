#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Counts the instructions of a kernel's steady-state loop in its SASS, by class, per weight: the
# static measurement behind the streaming kernel's instruction budget (bench/RESULTS.md, "Lean
# one-token streaming product"). Input: `cuobjdump -sass -fun FUNCTION BINARY` of one kernel (the
# text with its control words). The loop is the innermost backward branch whose body holds at least
# 100 FFMAs (the step loop of kernels/matvec_stream.cuh); with --skip-task-block, the guarded block in
# it that reads the kernel arguments (LDC: the lean form's once-per-task rows) is counted apart. Also
# sums the static stall cycles of the control words (cycles a lone warp waits before its next
# instruction, scoreboard waits not included).
# Usage: cuobjdump -sass -fun F mlxcel | bench/sass_loop.py WEIGHTS_PER_STEP [--skip-task-block]
import collections
import re
import sys


def kind(text):
    """The class of one instruction (predicate stripped)."""
    op = re.sub(r'^@!?U?P\w+\s+', '', text).split()[0]
    base = op.split('.')[0]
    if (op.startswith('IMAD.U32') and ', 0x10000, RZ' in text) or (op.startswith('SHF.L.U32') and ', 0x10, RZ' in text):
        return 'bf16 -> f32 (shift)'
    classes = {'LDG': 'LDG', 'LDS': 'LDS', 'LDC': 'LDC', 'ULDC': 'LDC', 'LOP3': 'LOP3/SHF', 'SHF': 'LOP3/SHF',
               'FFMA': 'FFMA', 'FADD': 'FADD', 'FMUL': 'FMUL', 'SHFL': 'SHFL', 'STL': 'spill', 'LDL': 'spill'}
    if base in classes:
        return classes[base]
    if base in ('ISETP', 'BRA', 'BSSY', 'BSYNC', 'PLOP3', 'UISETP'):
        return 'ISETP/branch'
    return 'IMAD/IADD/LEA/SEL/MOV'


def main():
    weights = int(sys.argv[1])
    skip_block = '--skip-task-block' in sys.argv
    lines = sys.stdin.read().splitlines()
    ins = []  # (address, text, control word)
    for i, line in enumerate(lines):
        m = re.match(r'\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s+/\* (0x[0-9a-f]{16}) \*/', line)
        if m and i + 1 < len(lines):
            c = re.search(r'/\* (0x[0-9a-f]{16}) \*/', lines[i + 1])
            ins.append((int(m.group(1), 16), m.group(2).rstrip(' ;'), int(c.group(1), 16) if c else 0))
    loops = []
    for a, t, _ in ins:
        m = re.search(r'BRA (0x[0-9a-f]+)', t)
        if m and int(m.group(1), 16) < a:
            lo = int(m.group(1), 16)
            if sum('FFMA' in u for b, u, _ in ins if lo <= b <= a) >= 100:
                loops.append((lo, a))
    if not loops:
        sys.exit('sass_loop.py: no loop with 100 FFMAs in the input')
    lo, hi = min(loops, key=lambda r: r[1] - r[0])
    body = [x for x in ins if lo <= x[0] <= hi]
    skipped = set()
    if skip_block:
        first = next((i for i, x in enumerate(body) if x[1].startswith('LDC')), None)
        if first is not None:
            i = first
            while i > 0 and not re.search(r'@!?P\d BRA 0x', body[i][1]):
                i -= 1
            end = int(re.search(r'BRA (0x[0-9a-f]+)', body[i][1]).group(1), 16)
            skipped = {x[0] for x in body if body[i][0] < x[0] < end}
    counts = collections.Counter(kind(t) for a, t, _ in body if a not in skipped)
    stalls = sum((c >> 41) & 0xf for a, _, c in body if a not in skipped)
    n = sum(counts.values())
    print(f'loop {lo:#x}-{hi:#x}: {n} instructions per step (+{len(skipped)} once per task), {weights} weights per '
          f'step: {n / weights:.2f} per weight; {stalls} static stall cycles ({stalls / n:.2f} per instruction)')
    for k, v in counts.most_common():
        print(f'  {k:24s} {v:5d} {v / weights:6.3f}')


if __name__ == '__main__':
    main()
