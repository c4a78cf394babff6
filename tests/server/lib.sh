# SPDX-License-Identifier: MIT
# Helpers for the server tests (sourced by bash scripts): a chat-capable copy of the demo model
# (its big files symlinked, the Qwen3 tokenizer_config.json with the chat template copied in),
# starting mlxcel-server on an ephemeral port and reading the port from its stderr line
# "mlxcel-server: listening on http://HOST:PORT", and stopping it.

# make_chat_model DIR: fills DIR with the demo model plus the Qwen3 chat template.
make_chat_model() {
    local dir=$1 root=${MLXCEL_ROOT:-$PWD} f
    mkdir -p "$dir"
    for f in "$root"/models/qwen3-demo-44m-4bit/*; do
        ln -sf "$f" "$dir/$(basename "$f")"
    done
    rm -f "$dir/tokenizer_config.json"
    cp "$root/tests/fixtures/qwen3_tokenizer_config.json" "$dir/tokenizer_config.json"
}

# srv_start BIN LOG ARGS...: starts the server; sets SRV_PID and SRV_URL. Fails after 30 s.
srv_start() {
    local bin=$1 log=$2 port="" i=0
    shift 2
    "$bin" --port 0 "$@" 2>"$log" &
    SRV_PID=$!
    while [ $i -lt 300 ]; do
        port=$(sed -n 's/^mlxcel-server: listening on http:\/\/.*:\([0-9][0-9]*\)$/\1/p' "$log")
        [ -n "$port" ] && break
        if ! kill -0 "$SRV_PID" 2>/dev/null; then
            echo "server exited early:" >&2
            cat "$log" >&2
            return 1
        fi
        sleep 0.1
        i=$((i + 1))
    done
    [ -n "$port" ] || { echo "server did not start" >&2; cat "$log" >&2; return 1; }
    SRV_URL="http://127.0.0.1:$port"
}

# srv_stop PID: SIGTERM, then wait (SIGKILL after 20 s). Returns the server's exit status.
srv_stop() {
    local pid=$1 i=0
    kill -TERM "$pid" 2>/dev/null || return 0
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 200 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    kill -0 "$pid" 2>/dev/null && { echo "server $pid did not stop; killing" >&2; kill -KILL "$pid"; }
    wait "$pid"
}
