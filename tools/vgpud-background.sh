# Sourced by the scripts that need a vgpud of their own (benchmarks, demo, GPU tests):
#   start_vgpud BIN SOCKET LOG EXECUTOR [LEVEL [MORE VGPUD OPTIONS...]]
# starts BIN/vgpud in the foreground of a background job, waits until it answers on SOCKET (or
# fails, showing LOG), and leaves its pid in VGPUD_PID. stop_vgpud ends it; scripts call it from
# their EXIT trap.

start_vgpud() {
    _bin=$1 _sock=$2 _log=$3 _exec=$4 _level=${5:-warn}
    if [ $# -ge 5 ]; then shift 5; else shift $#; fi
    "$_bin/vgpud" --socket "$_sock" --executor "$_exec" --foreground --log-level "$_level" "$@" >"$_log" 2>&1 &
    VGPUD_PID=$!
    _tries=0
    until "$_bin/vgpuctl" --socket "$_sock" ping >/dev/null 2>&1; do
        _tries=$((_tries + 1))
        if [ $_tries -gt 300 ] || ! kill -0 "$VGPUD_PID" 2>/dev/null; then
            echo "vgpud did not start:" >&2
            cat "$_log" >&2
            return 1
        fi
        sleep 0.1
    done
}

stop_vgpud() {
    if [ -n "${VGPUD_PID:-}" ]; then
        kill "$VGPUD_PID" 2>/dev/null
        wait "$VGPUD_PID" 2>/dev/null || true
    fi
}

# wait_vgpud_idle BIN SOCKET: until vgpud serves nobody and no worker of its is starting or ending
# (at most 10 s), so that one measured run does not overlap the end of the previous one.
wait_vgpud_idle() {
    for _ in $(seq 100); do
        "$1/vgpuctl" --socket "$2" --json 2>/dev/null | python3 -c '
import json, sys
j = json.load(sys.stdin)
busy = j["totals"]["sessions"] or any(w["phase"] in ("starting", "retiring") for w in j["workers"])
sys.exit(1 if busy else 0)' && return 0
        sleep 0.1
    done
}
