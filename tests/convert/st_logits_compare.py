#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Compares the "logits" tensor (F32) of two safetensors files: prints max|diff|/max|ref| and exits 1
# if it exceeds the tolerance. Pure standard library so the test needs no numpy.
import json, struct, sys

def logits(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    h = json.loads(data[8:8 + n])
    t = h["logits"]
    assert t["dtype"] == "F32", t
    b, e = t["data_offsets"]
    raw = data[8 + n + b:8 + n + e]
    return t["shape"], struct.unpack("<%df" % (len(raw) // 4), raw)

got_shape, got = logits(sys.argv[1])
ref_shape, ref = logits(sys.argv[2])
tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-3
if got_shape != ref_shape:
    print("shape %s != reference %s" % (got_shape, ref_shape))
    sys.exit(1)
diff = max(abs(a - b) for a, b in zip(got, ref))
scale = max(abs(b) for b in ref)
rel = diff / scale
print("logits %s: max|diff| %.3g, max|ref| %.3g, relative %.3g (tolerance %g)" % (got_shape, diff, scale, rel, tol))
sys.exit(0 if rel <= tol else 1)
