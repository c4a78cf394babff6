#!/bin/sh
# SPDX-License-Identifier: MIT
# CLI tests of `mlxcel convert`: a converted qwen3 model reproduces the reference logits, the mixed
# recipe and sharding produce a folder whose tensors are the MLX-made siblings' and whose loaded
# model computes what those tensors compute, and bad inputs fail with the documented exit codes
# (1 runtime, 2 usage) and a message naming the problem. Usage: cli_convert.sh MLXCEL_BINARY
set -u
BIN=$1
FIX=tests/fixtures/models
TMP=$(mktemp -d /tmp/mlxcel-cli-convert.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fails=0

ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails + 1)); }

# expect CODE PATTERN DESCRIPTION -- ARGS...: runs convert, checks the exit code and stderr.
expect() {
    code=$1; pattern=$2; what=$3; shift 4
    "$BIN" convert "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    if [ "$rc" -eq "$code" ] && grep -q -- "$pattern" "$TMP/err"; then ok "$what (exit $rc)"
    else bad "$what: exit $rc, stderr: $(cat "$TMP/err")"; fi
}

ids=$(python3 -c "import json;print(','.join(map(str,json.load(open('$FIX/qwen3-q4g64/reference.json'))['prompt_ids'])))")

# 1. -q on the bf16 qwen3 fixture gives the q4g64 model (bf16 scales, as the source's dtype); its
#    logits match that model's reference at the float32 CPU path's measured level (~1e-6; bound 2e-5),
#    so with the float32 KV cache (the default int16 one moves logits by ~1e-4).
"$BIN" convert --hf-path $FIX/qwen3-bf16 --mlx-path "$TMP/q4" -q 2>"$TMP/err" || bad "convert -q: $(cat "$TMP/err")"
if MLXCEL_CPU_KV=f32 "$BIN" logits -m "$TMP/q4" --ids "$ids" -o "$TMP/q4.safetensors" 2>"$TMP/err" &&
   python3 tests/convert/st_logits_compare.py "$TMP/q4.safetensors" $FIX/qwen3-q4g64/reference.safetensors 2e-5
then ok "converted q4 logits match the reference"; else bad "converted q4 logits: $(cat "$TMP/err")"; fi

# 2. bfloat16 output, mixed recipe, small shards: index and per-layer config; every tensor equals the
#    MLX-made uniform sibling's with the bits the config gives it; and the loaded mixed model computes
#    exactly what the same model assembled from the siblings' own tensors computes.
"$BIN" convert --hf-path $FIX/qwen3-bf16 --mlx-path "$TMP/mixed" -q --dtype bfloat16 \
    --quant-predicate mixed_3_6 --max-shard-size 64K 2>"$TMP/err" || bad "mixed convert: $(cat "$TMP/err")"
if [ -f "$TMP/mixed/model-00001-of-00004.safetensors" ] && [ -f "$TMP/mixed/model.safetensors.index.json" ] &&
   grep -q '"model.layers.0.self_attn.v_proj"' "$TMP/mixed/config.json"; then ok "mixed recipe: shards, index, per-layer config"
else bad "mixed recipe output: $(ls "$TMP/mixed")"; fi
if python3 tests/convert/mixed_from_siblings.py "$TMP/mixed" $FIX "$TMP/assembled" >"$TMP/cmp" 2>&1; then
    ok "mixed model: $(cat "$TMP/cmp")"
else bad "mixed model tensors: $(cat "$TMP/cmp")"; fi
if "$BIN" logits -m "$TMP/mixed" --ids "$ids" -o "$TMP/mixed.safetensors" 2>"$TMP/err" &&
   "$BIN" logits -m "$TMP/assembled" --ids "$ids" -o "$TMP/assembled.safetensors" 2>>"$TMP/err" &&
   python3 tests/convert/st_logits_compare.py "$TMP/mixed.safetensors" "$TMP/assembled.safetensors" 2e-5 >"$TMP/cmp"
then ok "mixed model loads and computes what the siblings' tensors compute: $(cat "$TMP/cmp")"
else bad "mixed model logits: $(cat "$TMP/cmp" "$TMP/err")"; fi

# 2b. gpt_oss as mlx-community ships it (-q --q-bits 8 --q-experts-mode mxfp4: experts mxfp4, the
#     rest affine 8-bit) from the Hugging Face layout: its logits are the gpt_oss-mxfp4 fixture's.
gids=$(python3 -c "import json;print(','.join(map(str,json.load(open('$FIX/gpt_oss-mxfp4/reference.json'))['prompt_ids'])))")
"$BIN" convert --hf-path $FIX/gpt_oss-bf16 --mlx-path "$TMP/oss" -q --q-bits 8 --q-experts-mode mxfp4 2>"$TMP/err" ||
    bad "gpt_oss convert: $(cat "$TMP/err")"
if grep -q '"mode": "mxfp4"' "$TMP/oss/config.json" &&
   MLXCEL_CPU_KV=f32 "$BIN" logits -m "$TMP/oss" --ids "$gids" -o "$TMP/oss.safetensors" 2>"$TMP/err" &&
   python3 tests/convert/st_logits_compare.py "$TMP/oss.safetensors" $FIX/gpt_oss-mxfp4/reference.safetensors 2e-5
then ok "gpt_oss with mxfp4 experts matches the gpt_oss-mxfp4 reference"; else bad "gpt_oss mxfp4 experts: $(cat "$TMP/err")"; fi

# 3. Bad inputs.
expect 2 "hf-path" "missing --hf-path" -- --mlx-path "$TMP/x"
expect 2 "q-bits" "bad --q-bits" -- --hf-path $FIX/qwen3-bf16 --mlx-path "$TMP/x" -q --q-bits 7
expect 2 "q-group-size" "bad --q-group-size" -- --hf-path $FIX/qwen3-bf16 --mlx-path "$TMP/x" -q --q-group-size 48
expect 2 "q-mode" "bad --q-mode" -- --hf-path $FIX/qwen3-bf16 --mlx-path "$TMP/x" -q --q-mode int4
expect 2 "mxfp8 needs bits 8" "mxfp8 with 4 bits" -- --hf-path $FIX/qwen3-bf16 --mlx-path "$TMP/x" -q --q-mode mxfp8 --q-bits 4
expect 2 "dtype" "bad --dtype" -- --hf-path $FIX/qwen3-bf16 --mlx-path "$TMP/x" --dtype int8
expect 2 "quant-predicate" "bad --quant-predicate" -- --hf-path $FIX/qwen3-bf16 --mlx-path "$TMP/x" -q --quant-predicate mixed_9_9
expect 2 "q-experts-mode" "bad --q-experts-mode" -- --hf-path $FIX/gpt_oss-bf16 --mlx-path "$TMP/x" -q --q-experts-mode affine
expect 2 "needs -q" "--q-experts-mode without -q" -- --hf-path $FIX/gpt_oss-bf16 --mlx-path "$TMP/x" --q-experts-mode mxfp4
expect 2 "unknown option" "unknown flag" -- --hf-path $FIX/qwen3-bf16 --bogus
expect 1 "not a folder" "missing input folder" -- --hf-path "$TMP/nope" --mlx-path "$TMP/x"
mkdir -p "$TMP/noconfig" && cp $FIX/qwen3-bf16/model.safetensors "$TMP/noconfig/"
expect 1 "no config.json" "no config.json" -- --hf-path "$TMP/noconfig" --mlx-path "$TMP/x"
mkdir -p "$TMP/noweights" && cp $FIX/qwen3-bf16/config.json "$TMP/noweights/"
expect 1 "no model\*.safetensors" "no safetensors" -- --hf-path "$TMP/noweights" --mlx-path "$TMP/x"
mkdir -p "$TMP/unknown_arch" && cp $FIX/qwen3-bf16/model.safetensors "$TMP/unknown_arch/" &&
    sed 's/"model_type": "qwen3"/"model_type": "falcon_mamba"/' $FIX/qwen3-bf16/config.json >"$TMP/unknown_arch/config.json"
expect 1 "unknown architecture 'falcon_mamba'" "unsupported architecture" -- --hf-path "$TMP/unknown_arch" --mlx-path "$TMP/x"
# An I64 tensor in an otherwise valid checkpoint.
mkdir -p "$TMP/i64" && cp $FIX/qwen3-bf16/config.json "$TMP/i64/"
python3 - "$TMP/i64/model.safetensors" <<'PY'
import json, struct, sys
h = json.dumps({"__metadata__": {"format": "pt"},
                "model.norm.weight": {"dtype": "I64", "shape": [4], "data_offsets": [0, 32]}}).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + bytes(32))
PY
expect 1 "dtype I64" "I64 weight" -- --hf-path "$TMP/i64" --mlx-path "$TMP/x"
[ ! -e "$TMP/x" ] && ok "failed runs left no output folder" || bad "a failed run left $TMP/x"
ls -d "$TMP"/x.tmp-* >/dev/null 2>&1 && bad "a failed run left a temporary folder" || ok "no temporary folders left"
expect 1 "already exists" "existing output without --force" -- --hf-path $FIX/qwen3-bf16 --mlx-path "$TMP/q4" -q
if "$BIN" convert --hf-path $FIX/qwen3-bf16 --mlx-path "$TMP/q4" --force 2>/dev/null &&
   ! grep -q quantization "$TMP/q4/config.json"; then ok "--force replaces the folder"; else bad "--force"; fi

[ "$fails" -eq 0 ] && echo "all convert CLI tests passed" || echo "$fails convert CLI test(s) failed"
[ "$fails" -eq 0 ]
