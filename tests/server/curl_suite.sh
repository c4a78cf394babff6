#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Server tests with curl against a live mlxcel-server (the demo model with the Qwen3 chat template)
# on an ephemeral port: completions and chat, JSON and SSE, usage counts, stop strings, seeds,
# logprobs, tokenize/detokenize, metrics, every bad request (400/401/404/405/413/503), and client
# disconnects freeing the slot. JSON is checked with python3. Usage: curl_suite.sh MLXCEL_SERVER
set -u
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
TMP=$(mktemp -d)
PIDS=""
cleanup() {
    for p in $PIDS; do srv_stop "$p" >/dev/null 2>&1; done
    rm -rf "$TMP"
}
trap cleanup EXIT
FAILS=0
CT='Content-Type: application/json'
ok() { echo "ok - $1"; }
bad() { echo "FAIL - $1"; FAILS=$((FAILS + 1)); }
# pycheck DESC FILE EXPR: EXPR (python, `d` = the parsed JSON of FILE) must be true.
pycheck() {
    if python3 - "$2" "$3" <<'PY'; then ok "$1"; else bad "$1"; echo "  body: $(head -c 600 "$2")"; fi
import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if eval(sys.argv[2]) else 1)
PY
}
# req METHOD PATH BODY OUT [curl args]: prints the HTTP status; body into OUT.
req() {
    local m=$1 p=$2 b=$3 o=$4
    shift 4
    if [ -n "$b" ]; then
        curl -s --max-time 60 -o "$o" -w '%{http_code}' -X "$m" -H "$AUTH" -H 'Content-Type: application/json' \
            --data-binary "$b" "$@" "$SRV_URL$p"
    else
        curl -s --max-time 60 -o "$o" -w '%{http_code}' -X "$m" -H "$AUTH" "$@" "$SRV_URL$p"
    fi
}
expect_status() { # DESC WANT GOT FILE
    if [ "$3" = "$2" ]; then ok "$1 ($2)"; else bad "$1: want $2, got $3"; head -c 400 "$4"; echo; fi
}
is_error_object='isinstance(d.get("error"), dict) and isinstance(d["error"].get("message"), str) and "type" in d["error"] and "code" in d["error"]'

MODEL="$TMP/model"
make_chat_model "$MODEL"
srv_start "$BIN" "$TMP/a.log" -m "$MODEL" --api-key sekret --parallel 4 --ctx 2048 --max-body 65536 || exit 1
PIDS="$SRV_PID"
AUTH="Authorization: Bearer sekret"

# --- health, auth, routes -----------------------------------------------------------------
s=$(curl -s --max-time 10 -o "$TMP/h.json" -w '%{http_code}' "$SRV_URL/health")
expect_status "/health needs no key" 200 "$s" "$TMP/h.json"
pycheck "/health reports slots" "$TMP/h.json" 'd["status"] == "ok" and d["slots_idle"] == 4'
s=$(curl -s --max-time 10 -o "$TMP/e.json" -w '%{http_code}' "$SRV_URL/v1/models")
expect_status "missing API key" 401 "$s" "$TMP/e.json"
pycheck "401 is an OpenAI error object" "$TMP/e.json" "$is_error_object"
s=$(curl -s --max-time 10 -o "$TMP/e.json" -w '%{http_code}' -H 'Authorization: Bearer wrong' "$SRV_URL/v1/models")
expect_status "wrong API key" 401 "$s" "$TMP/e.json"
s=$(req GET /v1/models "" "$TMP/m.json")
expect_status "/v1/models" 200 "$s" "$TMP/m.json"
pycheck "/v1/models lists the model" "$TMP/m.json" 'd["object"] == "list" and d["data"][0]["object"] == "model"'
s=$(req GET /v1/nope "" "$TMP/e.json")
expect_status "unknown route" 404 "$s" "$TMP/e.json"
pycheck "404 is an OpenAI error object" "$TMP/e.json" "$is_error_object"
s=$(req GET /v1/chat/completions "" "$TMP/e.json")
expect_status "wrong method" 405 "$s" "$TMP/e.json"
pycheck "405 is an OpenAI error object" "$TMP/e.json" "$is_error_object"

# --- bad requests ---------------------------------------------------------------------------
s=$(req POST /v1/chat/completions '{"messages": [' "$TMP/e.json")
expect_status "malformed JSON" 400 "$s" "$TMP/e.json"
pycheck "malformed JSON error object" "$TMP/e.json" "$is_error_object"
s=$(req POST /v1/chat/completions '{"model":"x"}' "$TMP/e.json")
expect_status "missing messages" 400 "$s" "$TMP/e.json"
pycheck "missing messages is named" "$TMP/e.json" '"messages" in d["error"]["message"]'
s=$(req POST /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"temperature":"hot"}' "$TMP/e.json")
expect_status "wrong type" 400 "$s" "$TMP/e.json"
pycheck "wrong type names the field" "$TMP/e.json" '"temperature" in d["error"]["message"]'
s=$(req POST /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"reasoning_effort":"high"}' "$TMP/e.json")
expect_status "reasoning_effort on a model that is not gpt-oss" 400 "$s" "$TMP/e.json"
pycheck "reasoning_effort error names the field" "$TMP/e.json" '"reasoning_effort" in d["error"]["message"]'
s=$(req POST /v1/completions '{"prompt":"hi","max_tokens":"5"}' "$TMP/e.json")
expect_status "wrong type (completions)" 400 "$s" "$TMP/e.json"
s=$(req POST /v1/completions '{"prompt":"hi","n":17}' "$TMP/e.json")
expect_status "n > 16" 400 "$s" "$TMP/e.json"
s=$(req POST /v1/completions '[1,2]' "$TMP/e.json")
expect_status "body not an object" 400 "$s" "$TMP/e.json"
LONG=$(python3 -c 'print("word " * 2500)')
s=$(req POST /v1/completions "{\"prompt\":\"$LONG\",\"max_tokens\":4}" "$TMP/e.json")
expect_status "prompt longer than the context" 400 "$s" "$TMP/e.json"
pycheck "context error gives the counts" "$TMP/e.json" '"2048" in d["error"]["message"] and "tokens" in d["error"]["message"] and d["error"]["code"] == "context_length_exceeded"'
python3 -c 'import json; print(json.dumps({"prompt": "x" * 100000}))' >"$TMP/big.json"
s=$(curl -s --max-time 20 -o "$TMP/e.json" -w '%{http_code}' -H "$AUTH" -H "$CT" --data-binary @"$TMP/big.json" "$SRV_URL/v1/completions")
expect_status "body over --max-body" 413 "$s" "$TMP/e.json"
pycheck "413 is an OpenAI error object" "$TMP/e.json" "$is_error_object"
s=$(req POST /v1/completions '{"prompt":"hi","max_tokens":2,"some_future_field":{"a":1}}' "$TMP/e.json")
expect_status "an unknown field is a 400" 400 "$s" "$TMP/e.json"
pycheck "the 400 names the field" "$TMP/e.json" '"some_future_field" in d["error"]["message"]'
s=$(req POST /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"max_completion_tokens":3}' "$TMP/e.json")
expect_status "max_tokens and max_completion_tokens that differ are a 400" 400 "$s" "$TMP/e.json"
pycheck "the 400 names both fields" "$TMP/e.json" '"max_tokens" in d["error"]["message"] and "max_completion_tokens" in d["error"]["message"]'
s=$(req POST /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"max_completion_tokens":2,"temperature":0}' "$TMP/o.json")
expect_status "max_tokens and max_completion_tokens with one value" 200 "$s" "$TMP/o.json"
pycheck "... limit the answer to it" "$TMP/o.json" 'd["usage"]["completion_tokens"] <= 2'
s=$(req POST /v1/completions '{"prompt":"hi","max_tokens":2,"user":"u1","metadata":{"k":"v"}}' "$TMP/o.json")
expect_status "harmless fields (user, metadata) are accepted" 200 "$s" "$TMP/o.json"
s=$(req POST /apply-template '{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"enable_thinking":false}}' "$TMP/o.json")
expect_status "/apply-template" 200 "$s" "$TMP/o.json"
pycheck "/apply-template renders the prompt" "$TMP/o.json" 'd["prompt"].startswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")'
s=$(req POST /apply-template '{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false}' "$TMP/o.json")
pycheck "/apply-template without the generation prompt" "$TMP/o.json" 'd["prompt"] == "<|im_start|>user\nhi<|im_end|>\n"'
s=$(req POST /apply-template '{"messages":[{"role":"user","content":"hi"}],"temperature":1}' "$TMP/e.json")
expect_status "/apply-template names an unsupported field" 400 "$s" "$TMP/e.json"
s=$(req POST /v1/embeddings '{"input":[]}' "$TMP/e.json")
expect_status "/v1/embeddings: empty input list" 400 "$s" "$TMP/e.json"
s=$(req POST /v1/embeddings '{"input":""}' "$TMP/e.json")
pycheck "/v1/embeddings: an empty string is a 400 naming the input" "$TMP/e.json" '"input" in d["error"]["message"]'
s=$(req POST /v1/embeddings '{"input":[1,2,99999999]}' "$TMP/e.json")
pycheck "/v1/embeddings: a token id outside the vocabulary is a 400" "$TMP/e.json" '"vocabulary" in d["error"]["message"]'
s=$(req POST /v1/embeddings '{"input":"x","encoding_format":"int8"}' "$TMP/e.json")
expect_status "/v1/embeddings: unknown encoding_format" 400 "$s" "$TMP/e.json"

# --- completions ----------------------------------------------------------------------------
s=$(req POST /tokenize '{"content":"The capital of France is"}' "$TMP/t.json")
expect_status "/tokenize" 200 "$s" "$TMP/t.json"
NTOK=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["tokens"]))' "$TMP/t.json")
TOKS=$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))' "$TMP/t.json")
s=$(req POST /detokenize "$TOKS" "$TMP/d.json")
expect_status "/detokenize" 200 "$s" "$TMP/d.json"
pycheck "tokenize/detokenize round trip" "$TMP/d.json" 'd["content"] == "The capital of France is"'
# /tokenize and /detokenize refuse unknown fields by name, as the other POST routes do; with_pieces
# gives each token's piece (a string, or its bytes when they are not whole UTF-8 characters: a
# character split across tokens), add_special false is what the route does, true is a 400.
s=$(req POST /tokenize '{"content":"x","parse_special":true}' "$TMP/e.json")
expect_status "/tokenize: an unknown field is a 400" 400 "$s" "$TMP/e.json"
pycheck "/tokenize: the 400 names the field" "$TMP/e.json" '"parse_special" in d["error"]["message"]'
s=$(req POST /detokenize '{"tokens":[1],"with_pieces":true}' "$TMP/e.json")
expect_status "/detokenize: an unknown field is a 400" 400 "$s" "$TMP/e.json"
pycheck "/detokenize: the 400 names the field" "$TMP/e.json" '"with_pieces" in d["error"]["message"]'
s=$(req POST /tokenize '{"content":"The capital of France is","add_special":true}' "$TMP/e.json")
expect_status "/tokenize: add_special true is a 400" 400 "$s" "$TMP/e.json"
pycheck "/tokenize: the 400 names add_special" "$TMP/e.json" '"add_special" in d["error"]["message"]'
s=$(req POST /tokenize '{"content":"The capital of France is","add_special":false,"with_pieces":false}' "$TMP/o.json")
pycheck "/tokenize: add_special and with_pieces false change nothing" "$TMP/o.json" "d == json.load(open('$TMP/t.json'))"
s=$(req POST /tokenize '{"content":"x","with_pieces":"yes"}' "$TMP/e.json")
expect_status "/tokenize: with_pieces must be a boolean" 400 "$s" "$TMP/e.json"
PIECES_TEXT='Hi 🦙 世界<|im_end|>'
s=$(req POST /tokenize "{\"content\":\"$PIECES_TEXT\"}" "$TMP/t2.json")
s=$(req POST /tokenize "{\"content\":\"$PIECES_TEXT\",\"with_pieces\":true}" "$TMP/p.json")
expect_status "/tokenize with_pieces" 200 "$s" "$TMP/p.json"
pycheck "/tokenize with_pieces: the same ids, each with its piece" "$TMP/p.json" "[t['id'] for t in d['tokens']] == json.load(open('$TMP/t2.json'))['tokens'] and all(set(t) == {'id', 'piece'} for t in d['tokens'])"
pycheck "/tokenize with_pieces: the pieces' bytes are the text's, a split character as byte lists" "$TMP/p.json" "b''.join(t['piece'].encode() if isinstance(t['piece'], str) else bytes(t['piece']) for t in d['tokens']) == '$PIECES_TEXT'.encode() and any(isinstance(t['piece'], list) for t in d['tokens']) and d['tokens'][-1]['piece'] == '<|im_end|>' and d['tokens'][0]['piece'] == 'Hi'"

BODY='{"prompt":"The capital of France is","max_tokens":12,"temperature":0}'
s=$(req POST /v1/completions "$BODY" "$TMP/c1.json")
expect_status "completion" 200 "$s" "$TMP/c1.json"
pycheck "completion shape and usage" "$TMP/c1.json" "d['object'] == 'text_completion' and d['usage']['prompt_tokens'] == $NTOK and 1 <= d['usage']['completion_tokens'] <= 12 and d['usage']['total_tokens'] == $NTOK + d['usage']['completion_tokens'] and d['choices'][0]['finish_reason'] in ('stop', 'length')"
req POST /v1/completions "$BODY" "$TMP/c2.json" >/dev/null
TEXT=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"], end="")' "$TMP/c1.json")
pycheck "temperature 0 is deterministic" "$TMP/c2.json" "d['choices'][0]['text'] == json.load(open('$TMP/c1.json'))['choices'][0]['text']"

# Streaming: same text, [DONE] last, usage chunk when asked.
curl -sN --max-time 60 -H "$AUTH" -H "$CT" -d '{"prompt":"The capital of France is","max_tokens":12,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}' \
    "$SRV_URL/v1/completions" >"$TMP/s.txt"
python3 - "$TMP/s.txt" "$TMP/c1.json" <<'PY' && ok "streamed completion equals the JSON one, ends with [DONE], usage chunk" || bad "streamed completion"
import json, sys
ev = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
ref = json.load(open(sys.argv[2]))
assert ev[-1] == "[DONE]", ev[-1]
chunks = [json.loads(e) for e in ev[:-1]]
text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
assert text == ref["choices"][0]["text"], (text, ref)
fin = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
assert fin == [ref["choices"][0]["finish_reason"]], fin
assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == ref["usage"], chunks[-1]
PY

# Stop strings: cut before the first occurrence, never a partial stop string in the stream.
STOP=$(python3 -c 'import sys; t=sys.argv[1]; print(t[len(t)//2:len(t)//2+3], end="")' "$TEXT")
WANT=$(python3 -c 'import sys; t, s = sys.argv[1], sys.argv[2]; print(t[:t.find(s)], end="")' "$TEXT" "$STOP")
SBODY=$(python3 -c 'import json,sys; print(json.dumps({"prompt":"The capital of France is","max_tokens":12,"temperature":0,"stop":["@@never@@", sys.argv[1]]}))' "$STOP")
req POST /v1/completions "$SBODY" "$TMP/st.json" >/dev/null
pycheck "stop string cuts the text (stop '$STOP')" "$TMP/st.json" "d['choices'][0]['text'] == '''$WANT''' and d['choices'][0]['finish_reason'] == 'stop'"
SBODY=$(python3 -c 'import json,sys; print(json.dumps({"prompt":"The capital of France is","max_tokens":12,"temperature":0,"stop":sys.argv[1],"stream":True}))' "$STOP")
curl -sN --max-time 60 -H "$AUTH" -H "$CT" -d "$SBODY" "$SRV_URL/v1/completions" >"$TMP/ss.txt"
python3 - "$TMP/ss.txt" "$WANT" <<'PY' && ok "streamed stop string" || bad "streamed stop string"
import json, sys
ev = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
chunks = [json.loads(e) for e in ev[:-1]]
text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
assert text == sys.argv[2], (text, sys.argv[2])
assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
PY

# Seeds: same seed, same sample.
SEEDB='{"prompt":"Once upon a time","max_tokens":10,"temperature":1.0,"seed":1234}'
req POST /v1/completions "$SEEDB" "$TMP/r1.json" >/dev/null
req POST /v1/completions "$SEEDB" "$TMP/r2.json" >/dev/null
pycheck "same seed, same text" "$TMP/r2.json" "d['choices'][0]['text'] == json.load(open('$TMP/r1.json'))['choices'][0]['text']"

# n > 1 streamed: one choice per chunk, named by its index; each choice streams the text of the
# same choice of the JSON answer (choice i samples with seed + i); usage counts every choice.
NB='{"prompt":"Once upon a time","max_tokens":8,"temperature":1.0,"seed":77,"n":3,"ignore_eos":true,"logprobs":1}'
req POST /v1/completions "$NB" "$TMP/n3.json" >/dev/null
NBS=$(python3 -c 'import json,sys; b=json.loads(sys.argv[1]); b["stream"]=True; b["stream_options"]={"include_usage":True}; print(json.dumps(b))' "$NB")
curl -sN --max-time 60 -H "$AUTH" -H "$CT" -d "$NBS" "$SRV_URL/v1/completions" >"$TMP/n3s.txt"
python3 - "$TMP/n3s.txt" "$TMP/n3.json" <<'PY' && ok "streamed n=3 completion: choices by index equal the JSON answer's (text, logprob tokens and their text offsets), one finish each, usage of all" || bad "streamed n=3 completion"
import json, sys
ev = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
ref = json.load(open(sys.argv[2]))
assert ev[-1] == "[DONE]", ev[-1]
chunks = [json.loads(e) for e in ev[:-1]]
assert all(len(c["choices"]) == 1 for c in chunks[:-1]), "one choice per chunk"
for i in range(3):
    mine = [c["choices"][0] for c in chunks[:-1] if c["choices"][0]["index"] == i]
    text = "".join(c["text"] for c in mine)
    assert text == ref["choices"][i]["text"], (i, text, ref["choices"][i])
    fin = [c["finish_reason"] for c in mine if c["finish_reason"]]
    assert fin == [ref["choices"][i]["finish_reason"]] and mine[-1]["finish_reason"], (i, fin)
    toks = sum((c["logprobs"]["tokens"] for c in mine if c["logprobs"]), [])
    assert toks == ref["choices"][i]["logprobs"]["tokens"], (i, toks)
    # Text offsets run on across chunks (the values may differ in the last bits: other batches).
    offs = sum((c["logprobs"]["text_offset"] for c in mine if c["logprobs"]), [])
    assert offs == ref["choices"][i]["logprobs"]["text_offset"], (i, offs)
assert len({c["text"] for c in ref["choices"]}) > 1, "the seeds differ"
assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == ref["usage"] and ref["usage"]["completion_tokens"] == 24, chunks[-1]
PY
CN='{"messages":[{"role":"user","content":"Say hello"}],"max_tokens":6,"temperature":0.9,"seed":5,"n":2,"chat_template_kwargs":{"enable_thinking":false}}'
req POST /v1/chat/completions "$CN" "$TMP/cn.json" >/dev/null
CNS=$(python3 -c 'import json,sys; b=json.loads(sys.argv[1]); b["stream"]=True; print(json.dumps(b))' "$CN")
curl -sN --max-time 60 -H "$AUTH" -H "$CT" -d "$CNS" "$SRV_URL/v1/chat/completions" >"$TMP/cns.txt"
python3 - "$TMP/cns.txt" "$TMP/cn.json" <<'PY' && ok "streamed n=2 chat: a role chunk and the content of each choice, no usage unless asked" || bad "streamed n=2 chat"
import json, sys
ev = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
ref = json.load(open(sys.argv[2]))
assert ev[-1] == "[DONE]"
chunks = [json.loads(e) for e in ev[:-1]]
assert all("usage" not in c for c in chunks)
for i in range(2):
    mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == i]
    assert mine[0]["delta"].get("role") == "assistant", mine[0]
    text = "".join(c["delta"].get("content") or "" for c in mine)
    assert text == ref["choices"][i]["message"]["content"], (i, text, ref["choices"][i])
    assert [c["finish_reason"] for c in mine if c["finish_reason"]] == [ref["choices"][i]["finish_reason"]]
PY

# Completion logprobs.
req POST /v1/completions '{"prompt":"Hello","max_tokens":4,"temperature":0,"logprobs":2}' "$TMP/lp.json" >/dev/null
pycheck "completion logprobs" "$TMP/lp.json" "len(d['choices'][0]['logprobs']['tokens']) == d['usage']['completion_tokens'] and all(len(t) <= 2 for t in d['choices'][0]['logprobs']['top_logprobs']) and all(x <= 0 for x in d['choices'][0]['logprobs']['token_logprobs'])"

# --- chat ----------------------------------------------------------------------------------
CB='{"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello"}],"max_tokens":10,"temperature":0,"chat_template_kwargs":{"enable_thinking":false}}'
s=$(req POST /v1/chat/completions "$CB" "$TMP/ch.json")
expect_status "chat completion" 200 "$s" "$TMP/ch.json"
pycheck "chat shape and usage" "$TMP/ch.json" "d['object'] == 'chat.completion' and d['choices'][0]['message']['role'] == 'assistant' and isinstance(d['choices'][0]['message']['content'], str) and d['usage']['completion_tokens'] <= 10 and d['usage']['prompt_tokens'] > 10"
CBS=$(python3 -c 'import json,sys; b=json.loads(sys.argv[1]); b["stream"]=True; b["stream_options"]={"include_usage":True}; print(json.dumps(b))' "$CB")
curl -sN --max-time 60 -H "$AUTH" -H "$CT" -d "$CBS" "$SRV_URL/v1/chat/completions" >"$TMP/chs.txt"
python3 - "$TMP/chs.txt" "$TMP/ch.json" <<'PY' && ok "streamed chat equals the JSON one (role chunk, deltas, usage, [DONE])" || bad "streamed chat"
import json, sys
ev = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
ref = json.load(open(sys.argv[2]))
assert ev[-1] == "[DONE]"
chunks = [json.loads(e) for e in ev[:-1]]
assert all(c["object"] == "chat.completion.chunk" for c in chunks)
assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
rc = ref["choices"][0]["message"]
assert text == rc["content"], (text, rc)
reasoning = "".join(c["choices"][0]["delta"].get("reasoning_content") or "" for c in chunks if c["choices"])
assert reasoning == rc.get("reasoning_content", ""), reasoning
assert chunks[-1]["usage"] == ref["usage"]
PY
s=$(req POST /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"temperature":0,"logprobs":true,"top_logprobs":3}' "$TMP/clp.json")
pycheck "chat logprobs" "$TMP/clp.json" "len(d['choices'][0]['logprobs']['content']) == d['usage']['completion_tokens'] and all(len(e['top_logprobs']) == 3 for e in d['choices'][0]['logprobs']['content'])"
s=$(req POST /v1/chat/completions '{"messages":[{"role":"user","content":"Weather?"}],"max_tokens":3,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]}' "$TMP/tl.json")
expect_status "chat with tools renders" 200 "$s" "$TMP/tl.json"

# --- disconnects free the slot -------------------------------------------------------------
# A stream is cancelled at its next write once the client is gone; a plain request runs to its
# end (the server cannot tell a gone client from a half-closed one before it writes).
curl -sN --max-time 1 -H "$AUTH" -H "$CT" -d '{"prompt":"Tell a long story","max_tokens":5000,"stream":true,"temperature":0,"ignore_eos":true}' \
    "$SRV_URL/v1/completions" >/dev/null 2>&1
curl -s --max-time 1 -H "$AUTH" -H "$CT" -d '{"prompt":"Tell a long story","max_tokens":30,"temperature":0,"ignore_eos":true}' \
    "$SRV_URL/v1/completions" >/dev/null 2>&1
freed=0
for i in $(seq 1 50); do
    curl -s --max-time 5 "$SRV_URL/health" >"$TMP/h.json"
    if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d["slots_processing"] == 0 else 1)' "$TMP/h.json"; then freed=1; break; fi
    sleep 0.1
done
[ $freed = 1 ] && ok "disconnected clients free their slots" || bad "slots still busy after disconnects: $(cat "$TMP/h.json")"
curl -s --max-time 5 -H "$AUTH" "$SRV_URL/metrics" >"$TMP/metrics.txt"
grep -q '^mlxcel_requests_cancelled_total [1-9]' "$TMP/metrics.txt" && ok "/metrics counts the cancelled requests" || { bad "/metrics cancelled count"; cat "$TMP/metrics.txt"; }
for m in mlxcel_requests_total mlxcel_generated_tokens_total mlxcel_queue_depth mlxcel_tokens_per_second \
         mlxcel_gpu_graph_replays_total mlxcel_gpu_graph_recordings_total mlxcel_plan_direct_runs_total \
         mlxcel_plans_built_total mlxcel_decode_steps_total mlxcel_scheduler_step_preemptions_total; do
    grep -q "^# TYPE $m " "$TMP/metrics.txt" && grep -q "^$m [0-9]" "$TMP/metrics.txt" || bad "/metrics lacks $m"
done

# --- queue full: 503 with Retry-After --------------------------------------------------------
srv_start "$BIN" "$TMP/b.log" -m "$MODEL" --parallel 1 --max-queue 1 --ctx 4096 || exit 1
PIDS="$PIDS $SRV_PID"
AUTH="X-None: 1"
CURLS=""
# wait_state P Q: waits (up to ~20 s) until /health shows P processing and Q queued.
full=0
wait_state() {
    local i
    for i in $(seq 200); do
        curl -s --max-time 2 "$SRV_URL/health" | grep -q "\"slots_processing\":$1,\"queue\":$2" && return 0
        sleep 0.1
    done
    return 1
}
# One request runs, then one waits (started in that order: a busy machine may admit the first late).
for k in 1 2; do
    # Long enough to still run on a loaded machine; killed below once the 503 is checked.
    curl -sN --max-time 60 -H "$CT" -d '{"prompt":"Count","max_tokens":3500,"stream":true,"ignore_eos":true}' "$SRV_URL/v1/completions" >/dev/null 2>&1 &
    CURLS="$CURLS $!"
    wait_state 1 $((k - 1)) && full=$((k - 1))
done
[ $full = 1 ] || bad "queue never held one running and one waiting request: $(curl -s --max-time 2 "$SRV_URL/health")"
s=$(curl -s --max-time 10 -D "$TMP/hdr.txt" -o "$TMP/e.json" -w '%{http_code}' -H "$CT" -d '{"prompt":"x","max_tokens":2}' "$SRV_URL/v1/completions")
expect_status "queue full" 503 "$s" "$TMP/e.json"
pycheck "503 is an OpenAI error object" "$TMP/e.json" "$is_error_object"
grep -qi '^Retry-After:' "$TMP/hdr.txt" && ok "503 has Retry-After" || bad "503 without Retry-After"
for p in $CURLS; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done

# --- --timeout: a running request ends with finish_reason "length"; a request queued behind it
# (its deadline comes later) is still served ------------------------------------------------
srv_start "$BIN" "$TMP/c.log" -m "$MODEL" --parallel 1 --ctx 4096 --timeout 2 || exit 1
PIDS="$PIDS $SRV_PID"
t0=$(date +%s)
curl -s --max-time 30 -o "$TMP/t1.json" -w '%{http_code}' -H "$CT" \
    -d '{"prompt":"Count","max_tokens":3500,"ignore_eos":true}' "$SRV_URL/v1/completions" >"$TMP/t1.code" &
T1=$!
sleep 1  # the second deadline 1 s after the first: a step under a sanitizer on a busy machine can take 0.5 s
s=$(curl -s --max-time 30 -o "$TMP/t2.json" -w '%{http_code}' -H "$CT" -d '{"prompt":"x","max_tokens":2}' "$SRV_URL/v1/completions")
wait "$T1"
t1=$(date +%s)
expect_status "running request past --timeout" 200 "$(cat "$TMP/t1.code")" "$TMP/t1.json"
pycheck "timed-out request ends with finish_reason length, short of max_tokens" "$TMP/t1.json" \
    'd["choices"][0]["finish_reason"] == "length" and d["usage"]["completion_tokens"] < 3500'
[ $((t1 - t0)) -le 12 ] && ok "timeout honoured ($((t1 - t0)) s)" || bad "timeout took $((t1 - t0)) s"
expect_status "request queued behind a timed-out one" 200 "$s" "$TMP/t2.json"
pycheck "queued request answered after the slot was freed" "$TMP/t2.json" 'd["usage"]["completion_tokens"] == 2'

for p in $PIDS; do
    srv_stop "$p" && ok "server $p stopped cleanly" || bad "server $p exit status"
done
PIDS=""
if grep -q 'runtime error\|AddressSanitizer\|LeakSanitizer' "$TMP/a.log" "$TMP/b.log" "$TMP/c.log"; then
    bad "sanitizer reports"; cat "$TMP/a.log" "$TMP/b.log" "$TMP/c.log"
fi
echo "$FAILS failures"
[ $FAILS = 0 ]
