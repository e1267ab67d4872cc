#!/bin/bash
# Native vs vGPU, side by side in one run: every benchmark runs once against the machine's own
# driver and once through vgpu-run against a vgpud with the cuda executor, then the two are
# printed together with their ratio. Needs an NVIDIA GPU.
#   VGPU_BIN     directory of vgpud, vgpu-run (default build/bin)
#   BENCH_BIN    directory of the benchmark programs (default build/benchmarks)
#   BENCH_MODULE fatbin holding the `empty` kernel
#   BENCH_OUT    where to write the raw and combined results (default build/benchmarks/results)
set -eu
VGPU_BIN=${VGPU_BIN:-build/bin}
BENCH_BIN=${BENCH_BIN:-build/benchmarks}
BENCH_MODULE=${BENCH_MODULE:-build/tests/kernels/basic.fatbin}
BENCH_OUT=${BENCH_OUT:-build/benchmarks/results}
mkdir -p "$BENCH_OUT"
sock=$(mktemp -u /tmp/vgpud-bench.XXXXXX)
"$VGPU_BIN/vgpud" --socket "$sock" --executor cuda --foreground --log-level warn >"$BENCH_OUT/vgpud.log" 2>&1 &
vgpud=$!
trap 'kill $vgpud 2>/dev/null; wait $vgpud 2>/dev/null || true' EXIT
i=0
until "$VGPU_BIN/vgpuctl" --socket "$sock" ping >/dev/null 2>&1; do
    i=$((i + 1))
    if [ $i -gt 300 ] || ! kill -0 $vgpud 2>/dev/null; then
        echo "run.sh: vgpud did not start:"; cat "$BENCH_OUT/vgpud.log"; exit 1
    fi
    sleep 0.1
done

run_pair() { # name, program and arguments
    name=$1; shift
    echo "== $name: native" >&2
    "$@" >"$BENCH_OUT/$name.native"
    echo "== $name: vgpu" >&2
    "$VGPU_BIN/vgpu-run" --socket "$sock" -- "$@" >"$BENCH_OUT/$name.vgpu"
}

run_pair latency "$BENCH_BIN/bench_latency"
run_pair launch "$BENCH_BIN/bench_launch" "$BENCH_MODULE"
run_pair copy "$BENCH_BIN/bench_copy"

{
    echo "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo unknown)"
    echo "date:   $(date -u +%Y-%m-%dT%H:%MZ)"
    printf '%-32s %14s %14s %9s\n' metric native vgpu vgpu/native
    for f in latency launch copy; do
        join -j 1 <(awk '/^RESULT/ {print $2, $3, $4}' "$BENCH_OUT/$f.native" | sort -k1,1) \
                  <(awk '/^RESULT/ {print $2, $3}' "$BENCH_OUT/$f.vgpu" | sort -k1,1) |
        awk '{ printf "%-32s %10.3f %-3s %10.3f %-3s %8.3f\n", $1, $2, substr($3,1,3), $4, substr($3,1,3), ($2 > 0 ? $4 / $2 : 0) }' |
        sort -t_ -k1,1 -k3,3n
    done
} | tee "$BENCH_OUT/summary.txt"
