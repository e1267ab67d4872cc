#!/bin/bash
# Native vs vGPU, side by side in one run: every benchmark runs once against the machine's own
# driver and once through vgpu-run against a vgpud with the cuda executor, then the two are
# printed together with their ratio. Needs an NVIDIA GPU.
#   VGPU_BIN     directory of vgpud, vgpu-run (default build/bin)
#   BENCH_BIN    directory of the benchmark programs (default build/benchmarks)
#   BENCH_MODULE fatbin holding the `empty` kernel
#   BENCH_OUT    where to write the raw and combined results (default build/benchmarks/results)
#   BENCH_ROUNDS how many times each pair runs, alternating native and vGPU (default 3); each side
#                keeps its best figure (lowest latency, highest rate or bandwidth), which shields
#                the comparison from a noisy neighbour on the machine
set -eu
VGPU_BIN=${VGPU_BIN:-build/bin}
BENCH_BIN=${BENCH_BIN:-build/benchmarks}
BENCH_MODULE=${BENCH_MODULE:-build/tests/kernels/basic.fatbin}
BENCH_OUT=${BENCH_OUT:-build/benchmarks/results}
BENCH_ROUNDS=${BENCH_ROUNDS:-3}
mkdir -p "$BENCH_OUT"
sock=$(mktemp -u /tmp/vgpud-bench.XXXXXX)
. "$(dirname "$0")/../tools/vgpud-background.sh"
trap stop_vgpud EXIT
start_vgpud "$VGPU_BIN" "$sock" "$BENCH_OUT/vgpud.log" cuda

run_pair() { # name, program and arguments
    name=$1; shift
    : >"$BENCH_OUT/$name.native"
    : >"$BENCH_OUT/$name.vgpu"
    for round in $(seq "$BENCH_ROUNDS"); do
        echo "== $name, round $round: native" >&2
        "$@" >>"$BENCH_OUT/$name.native"
        echo "== $name, round $round: vgpu" >&2
        "$VGPU_BIN/vgpu-run" --socket "$sock" -- "$@" >>"$BENCH_OUT/$name.vgpu"
    done
}

# The best of the rounds for every metric: the smallest time, the largest rate or bandwidth.
best() {
    awk '/^RESULT/ { k = $2; v = $3; u = $4; lower = (u == "us");
                     if (!(k in b) || (lower ? v < b[k] : v > b[k])) b[k] = v; unit[k] = u }
         END { for (k in b) print k, b[k], unit[k] }' "$1"
}

run_pair latency "$BENCH_BIN/bench_latency"
run_pair launch "$BENCH_BIN/bench_launch" "$BENCH_MODULE"
run_pair copy "$BENCH_BIN/bench_copy"

{
    echo "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo unknown)"
    echo "date:   $(date -u +%Y-%m-%dT%H:%MZ), best of $BENCH_ROUNDS alternating rounds"
    printf '%-32s %14s %14s %9s\n' metric native vgpu vgpu/native
    for f in latency launch copy; do
        join -j 1 <(best "$BENCH_OUT/$f.native" | sort -k1,1) \
                  <(best "$BENCH_OUT/$f.vgpu" | awk '{print $1, $2}' | sort -k1,1) |
        awk '{ printf "%-32s %10.3f %-3s %10.3f %-3s %8.3f\n", $1, $2, substr($3,1,3), $4, substr($3,1,3), ($2 > 0 ? $4 / $2 : 0) }' |
        sort -t_ -k1,2 -k3,3n
    done
} | tee "$BENCH_OUT/summary.txt"
