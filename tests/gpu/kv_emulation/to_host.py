#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Turns a kernel file (CUDA dialect) into host C++ for the emulation (emu.h): dynamic shared memory
# becomes the emulator's buffer, __shared__ variables statics, and each launch
# `kernel<<<grid, block, smem, stream>>>(args)` a call emu_launch(grid, block, smem, [=] { kernel(args); }).
# Usage: to_host.py FILE.cu > FILE.cpp
import re
import sys
src = open(sys.argv[1]).read()
src = src.replace('extern __shared__ __align__(16) unsigned char smem_raw[];', 'unsigned char *smem_raw = emu_smem();')
src = re.sub(r'extern __shared__ (float4?) (\w+)\[\];', r'\1 *\2 = (\1 *)emu_smem();', src)
assert 'extern __shared__' not in src, 'dynamic shared memory in a form to_host.py does not know'
src = src.replace('__shared__ ', 'static ')
out = []; i = 0
while True:
    j = src.find('<<<', i)
    if j < 0: out.append(src[i:]); break
    # kernel name: back to start of identifier incl. template args
    k = j
    depth = 0
    while True:
        c = src[k-1]
        if c == '>': depth += 1
        elif c == '<': depth -= 1
        elif depth == 0 and not (c.isalnum() or c == '_'): break
        k -= 1
    name = src[k:j]
    e = src.find('>>>', j)
    cfg = src[j+3:e]
    # split cfg at top-level commas
    parts = []; d = 0; cur = ''
    for c in cfg:
        if c in '([': d += 1
        if c in ')]': d -= 1
        if c == ',' and d == 0: parts.append(cur); cur = ''
        else: cur += c
    parts.append(cur)
    assert src[e + 3] == '(', 'a launch not followed by its arguments: ' + src[j - 40:e + 20]
    p = e + 3; d = 0
    while True:
        if src[p] == '(': d += 1
        elif src[p] == ')':
            d -= 1
            if d == 0: break
        p += 1
    args = src[e+4:p]
    out.append(src[i:k])
    out.append('emu_launch(dim3(%s), dim3(%s), (size_t)(%s), [=]() { %s(%s); })' % (parts[0], parts[1], parts[2], name, args))
    i = p + 1
sys.stdout.write('#include "emu.h"\n' + ''.join(out))
