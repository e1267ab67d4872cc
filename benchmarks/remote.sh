#!/bin/bash
# Remote vGPUs side by side with native and local ones, in one run: two vgpuds on this host, nodes
# a and b linked over UCX (TCP on loopback here; verbs where the fabric has them), and each
# benchmark run natively, on a local vGPU of a, on b's vGPU reached from a (batched, vgpud's
# default), and on b's vGPU with each call sent alone (--remote-batch 1,0,0). With two GPUs, a
# serves the first and b the second. Prints every figure and its ratio to native. Needs a GPU.
#   VGPU_BIN, BENCH_BIN, BENCH_MODULE, BENCH_OUT as for run.sh; REMOTE_PARTS (default "latency launch copy")
#   REMOTE_BATCH  the batched configuration's --remote-batch (default vgpud's)
#   REMOTE_EXECUTOR cuda (default), or emu to try the script where there is no GPU
set -eu
VGPU_BIN=${VGPU_BIN:-build/bin}
BENCH_BIN=${BENCH_BIN:-build/benchmarks}
BENCH_MODULE=${BENCH_MODULE:-build/tests/kernels/basic.fatbin}
BENCH_OUT=${BENCH_OUT:-build/benchmarks/results}/remote
REMOTE_PARTS=" ${REMOTE_PARTS:-latency launch copy} "
mkdir -p "$BENCH_OUT"
rm -f "$BENCH_OUT"/*.res
key=$BENCH_OUT/cluster.key
head -c 32 /dev/urandom >"$key"
EXECUTOR=${REMOTE_EXECUTOR:-cuda}
gpus=$([ "$EXECUTOR" = cuda ] && nvidia-smi -L | wc -l || echo 1)
port=$((20000 + $$ % 20000))
pids=()
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; pids=(); }
trap stop_all EXIT
start_pair() { # more vgpud options for both
    stop_all
    for n in a b; do
        local me=$n other=$([ $n = a ] && echo b || echo a) mine=$port theirs=$((port + 1))
        [ $n = b ] && mine=$((port + 1)) theirs=$port
        local visible=0
        [ "$gpus" -ge 2 ] && [ $n = b ] && visible=1
        CUDA_VISIBLE_DEVICES=$visible "$VGPU_BIN/vgpud" --foreground --executor "$EXECUTOR" --log-level warn \
            --socket "$BENCH_OUT/$n.sock" --node $me --remote-listen 127.0.0.1:$mine --peer $other=127.0.0.1:$theirs \
            --cluster-key "$key" "$@" >"$BENCH_OUT/vgpud-$n.log" 2>&1 &
        pids+=($!)
    done
    for _ in $(seq 200); do
        "$VGPU_BIN/vgpuctl" --socket "$BENCH_OUT/a.sock" --json cluster 2>/dev/null | grep -q '"state":"up"' && return 0
        sleep 0.1
    done
    echo "the vgpuds did not link:" >&2; cat "$BENCH_OUT"/vgpud-*.log >&2; return 1
}
part() { case $REMOTE_PARTS in *" $1 "*) return 0 ;; esac; return 1; }
run_all() { # config name, vgpu-run arguments (none: native)
    local cfg=$1; shift
    part latency && "$@" "$BENCH_BIN/bench_latency" 20000 >>"$BENCH_OUT/$cfg.res"
    part launch && "$@" "$BENCH_BIN/bench_launch" "$BENCH_MODULE" 200000 >>"$BENCH_OUT/$cfg.res"
    part copy && "$@" "$BENCH_BIN/bench_copy" $((64 << 20)) >>"$BENCH_OUT/$cfg.res"
    return 0
}
if [ "$EXECUTOR" = cuda ]; then run_all native env; fi
start_pair ${REMOTE_BATCH:+--remote-batch "$REMOTE_BATCH"}
run_all local "$VGPU_BIN/vgpu-run" --socket "$BENCH_OUT/a.sock" --vgpu device=0 --
run_all remote "$VGPU_BIN/vgpu-run" --socket "$BENCH_OUT/a.sock" --vgpu node=b,device=0 --
start_pair --remote-batch 1,0,0
run_all remote-unbatched "$VGPU_BIN/vgpu-run" --socket "$BENCH_OUT/a.sock" --vgpu node=b,device=0 --
stop_all
echo "device: $([ "$EXECUTOR" = cuda ] && nvidia-smi --query-gpu=name --format=csv,noheader | head -1 || echo emu) x $gpus; link: UCX over TCP, loopback"
python3 - "$BENCH_OUT" <<'PY'
import sys, os
d = sys.argv[1]
cfgs = ["native", "local", "remote", "remote-unbatched"]
res = {}
for c in cfgs:
    res[c] = {}
    if not os.path.exists(os.path.join(d, c + ".res")):
        continue
    for line in open(os.path.join(d, c + ".res")):
        p = line.split()
        if len(p) >= 4 and p[0] == "RESULT":
            res[c][p[1]] = (float(p[2]), p[3])
base = "native" if res["native"] else "local"  # emu: no native run
print("%-28s %14s %14s %14s %16s   %s" % ("figure", "native", "local", "remote", "remote unbatched", "ratios to " + base))
for k in res[base]:
    v, unit = res[base][k]
    row = [res[c].get(k, (float("nan"), unit))[0] for c in cfgs]
    ratios = " ".join("%.3f" % (x / v) if v else "-" for x in row[1:])
    print("%-28s %14.3f %14.3f %14.3f %16.3f   %s (%s)" % (k, *row, ratios, unit))
PY
