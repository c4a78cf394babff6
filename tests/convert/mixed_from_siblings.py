#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Checks a mixed-recipe conversion of the qwen3-bf16 fixture against the MLX-made uniform siblings:
# every tensor of MIXED (any number of shards) must equal, byte for byte, the same tensor of
# qwen3-q{bits}g64, bits being what MIXED's config.json gives its module (unquantized tensors:
# the q4g64 sibling's). Then writes OUT, the same model assembled only from the siblings' tensors
# with MIXED's config.json, so that the caller can check that the loaded mixed model computes what
# the MLX-written tensors compute. Pure standard library.
# Usage: mixed_from_siblings.py MIXED FIXTURES_MODELS OUT   (exit 1 and a message on any difference)
import glob, json, os, struct, sys


def load(folder):
    tensors = {}
    for path in sorted(glob.glob(os.path.join(folder, "model*.safetensors"))):
        raw = open(path, "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        for name, t in json.loads(raw[8:8 + n]).items():
            if name != "__metadata__":
                begin, end = t["data_offsets"]
                tensors[name] = (t["dtype"], t["shape"], raw[8 + n + begin:8 + n + end])
    return tensors


mixed_dir, fixtures, out = sys.argv[1:4]
mixed = load(mixed_dir)
config = json.load(open(os.path.join(mixed_dir, "config.json")))
quant = config["quantization"]
siblings = {}
problems = []
for name, (dtype, shape, data) in sorted(mixed.items()):
    module, _, kind = name.rpartition(".")
    override = quant.get(module)
    quantized = override is not False and (dtype == "U32" or kind in ("scales", "biases"))
    bits = override["bits"] if quantized and isinstance(override, dict) else quant["bits"]
    if isinstance(override, dict) and override.get("group_size", 64) != 64:
        problems.append("%s: group size %s (the siblings have 64)" % (name, override.get("group_size")))
        continue
    if bits not in siblings:
        siblings[bits] = load(os.path.join(fixtures, "qwen3-q%dg64" % bits))
    ref = siblings[bits].get(name)
    if ref is None:
        problems.append("%s: not in the %d-bit sibling" % (name, bits))
    elif ref != (dtype, shape, data):
        problems.append("%s (%d-bit): %s %s differs from the sibling's %s %s" % (name, bits, dtype, shape, ref[0], ref[1]))
    else:
        mixed[name] = ref
if problems:
    print("mixed conversion differs from the MLX-made siblings:\n  " + "\n  ".join(problems[:10]))
    sys.exit(1)

# The assembled folder: one file, header padded to 8 bytes, data in name order.
header, blobs, offset = {}, [], 0
for name, (dtype, shape, data) in sorted(mixed.items()):
    header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
    blobs.append(data)
    offset += len(data)
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=1)
print("%d tensors equal to the siblings' (bits %s)" % (len(mixed), sorted(siblings)))
