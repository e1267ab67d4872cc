#!/bin/bash
# Peer copies between two vGPUs of other nodes, pushed node to node, side by side with the same
# copies made through the tenant's memory, in one run: three vgpuds on this host (nodes a, b and d,
# linked over UCX on loopback TCP), a tenant of a with an assembly of b's vGPU and d's running
# bench_peer (cuMemcpyPeer, and BENCH_PEER_HOST's copies through the host). Prints both and their
# ratio. On loopback it bounds the software, not a fabric.
#   VGPU_BIN, BENCH_BIN, BENCH_OUT as for run.sh
#   PUSH_EXECUTOR  cuda (default: with two GPUs, b serves the first and d the second), or emu
#   PUSH_MAX       the largest copy (default 64 MiB); PUSH_BYTES what each size moves (default 1 GiB)
set -eu
VGPU_BIN=${VGPU_BIN:-build/bin}
BENCH_BIN=${BENCH_BIN:-build/benchmarks}
BENCH_OUT=${BENCH_OUT:-build/benchmarks/results}/push
EXECUTOR=${PUSH_EXECUTOR:-cuda}
mkdir -p "$BENCH_OUT"
key=$BENCH_OUT/cluster.key
head -c 32 /dev/urandom >"$key"
gpus=$([ "$EXECUTOR" = cuda ] && nvidia-smi -L | wc -l || echo 1)
port=$((20000 + $$ % 20000))
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done' EXIT
i=0
for n in a b d; do
    peers=""
    j=0
    for m in a b d; do
        [ "$m" != "$n" ] && peers="$peers --peer $m=127.0.0.1:$((port + j))"
        j=$((j + 1))
    done
    visible=0
    [ "$gpus" -ge 2 ] && [ $n = d ] && visible=1
    CUDA_VISIBLE_DEVICES=$visible "$VGPU_BIN/vgpud" --foreground --executor "$EXECUTOR" --log-level warn \
        --socket "$BENCH_OUT/$n.sock" --node $n --remote-listen 127.0.0.1:$((port + i)) $peers \
        --cluster-key "$key" >"$BENCH_OUT/vgpud-$n.log" 2>&1 &
    pids+=($!)
    i=$((i + 1))
done
for _ in $(seq 200); do
    [ "$("$VGPU_BIN/vgpuctl" --socket "$BENCH_OUT/a.sock" --json cluster 2>/dev/null | grep -o '"state":"up"' | wc -l)" -ge 4 ] && break
    sleep 0.1
done
sleep 1 # the nodes' GPUs, said when their links come up
BENCH_PEER_HOST=1 "$VGPU_BIN/vgpu-run" --socket "$BENCH_OUT/a.sock" --vgpu node=b,device=0 --vgpu node=d,device=0 -- \
    "$BENCH_BIN/bench_peer" "${PUSH_MAX:-$((64 << 20))}" "${PUSH_BYTES:-$((1 << 30))}" >"$BENCH_OUT/push.res"
echo "device: $([ "$EXECUTOR" = cuda ] && nvidia-smi --query-gpu=name --format=csv,noheader | head -1 || echo emu), links: UCX over loopback TCP"
python3 - "$BENCH_OUT/push.res" <<'PY'
import sys
res = {}
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) >= 4 and p[0] == "RESULT":
        res[p[1]] = float(p[2])
print("%-22s %12s %12s %8s" % ("copy", "pushed GB/s", "host GB/s", "ratio"))
for k in sorted((k for k in res if k.startswith("peer_")), key=lambda k: (k.split("_")[1], int(k.split("_")[2]))):
    h = res.get("host_" + k[5:])
    print("%-22s %12.3f %12.3f %8.2f" % (k[5:], res[k], h or 0, res[k] / h if h else 0))
PY
