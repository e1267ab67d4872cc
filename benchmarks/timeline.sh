#!/bin/bash
# Where a remote vGPU's time goes: two vgpuds on this host (a and b, UCX over TCP on loopback, then
# over shared memory), every process logging at trace level, and on b's vGPU reached from a:
# bench_copy of each SIZE (its copies to pageable memory are followed), then bench_latency. The
# timeline points (LOG_TIMELINE: the tenant's frontend, the workers, both vgpuds and their links)
# of every process are put in one order by the monotonic clock, and timeline.py prints, for the
# most common sequence of points, the median time from the first and from the point before.
# Trace logging costs each point a microsecond or two: read the steps, not the totals.
#   VGPU_BIN, BENCH_BIN as for run.sh; TIMELINE_SIZES (default "1048576 4194304");
#   TIMELINE_TRANSPORTS (NAME=UCX_TLS ..., default tcp and shared memory); TIMELINE_OUT (default
#   build/benchmarks/results/timeline); TIMELINE_EXECUTOR (cuda, or emu where there is no GPU);
#   TIMELINE_SHOW (how many copies to print whole, those of about the median's length; default 1);
#   TIMELINE_OPTS (more vgpud options for both, e.g. --remote-piece 256K)
set -eu
VGPU_BIN=${VGPU_BIN:-build/bin}
BENCH_BIN=${BENCH_BIN:-build/benchmarks}
OUT=${TIMELINE_OUT:-build/benchmarks/results/timeline}
HERE=$(dirname "$0")
mkdir -p "$OUT"
rm -f "$OUT"/*.log "$OUT"/*.res
PAIR_DIR=$OUT PAIR_EXECUTOR=${TIMELINE_EXECUTOR:-cuda} PAIR_LEVEL=trace PAIR_GPUS=1
. "$HERE/vgpud_pair.sh"
for t in ${TIMELINE_TRANSPORTS:-tcp=tcp shm=posix,sysv,self,tcp}; do
    name=${t%%=*}
    export UCX_TLS=${t#*=}
    PAIR_LOGS=$OUT/$name-vgpud pair_start ${TIMELINE_OPTS:-}
    run() { # label, program and arguments
        local label=$1; shift
        VGPU_LOG_LEVEL=trace "$VGPU_BIN/vgpu-run" --socket "$OUT/a.sock" --vgpu node=b,device=0 -- "$@" \
            >"$OUT/$name-$label.res" 2>"$OUT/$name-$label-tenant.log"
    }
    for s in ${TIMELINE_SIZES:-1048576 4194304}; do
        # (A copy of one size at a time: the vgpuds' logs hold every run's points, told apart by time.)
        echo "timeline $(python3 -c "import time; print(time.monotonic_ns())") mark.start 0" >"$OUT/$name-copy$s-mark.log"
        run copy$s "$BENCH_BIN/bench_copy" "$s" "$s"
    done
    echo "timeline $(python3 -c "import time; print(time.monotonic_ns())") mark.start 0" >"$OUT/$name-latency-mark.log"
    run latency "$BENCH_BIN/bench_latency" 5000
    pair_stop
    unset UCX_TLS
    for s in ${TIMELINE_SIZES:-1048576 4194304}; do
        echo "== $name: a $s-byte copy to pageable memory on b's vGPU (bench_copy), from the frontend's first point"
        python3 "$HERE/timeline.py" --start fe.copy_out --value "$s" --end fe.copy_out_done --show "${TIMELINE_SHOW:-1}" \
            mark="$OUT/$name-copy$s-mark.log" tenant="$OUT/$name-copy$s-tenant.log" \
            a="$OUT/$name-vgpud-a.log" b="$OUT/$name-vgpud-b.log"
        grep -h "RESULT dtoh_pageable" "$OUT/$name-copy$s.res" || true
    done
    echo "== $name: a synchronous call on b's vGPU (bench_latency), from a's relay to its answer"
    python3 "$HERE/timeline.py" --start relay.request --end relay.answered \
        mark="$OUT/$name-latency-mark.log" a="$OUT/$name-vgpud-a.log" b="$OUT/$name-vgpud-b.log"
    grep -h "RESULT ctx_synchronize_median" "$OUT/$name-latency.res" || true
done
