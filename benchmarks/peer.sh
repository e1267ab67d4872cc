#!/bin/bash
# Work between two devices natively and between the two vGPUs of an assembly of this node's GPUs 0
# and 1, in one run, with their ratios to native: copies (cuMemcpyPeer, bench_peer; the vGPUs'
# copies run in the tenant's worker, device to device), or with PEER_PROG=bench_nccl NCCL's
# all-reduce. Needs two GPUs.
#   VGPU_BIN, BENCH_BIN, BENCH_OUT as for run.sh
#   PEER_PROG        the benchmark program (default bench_peer)
#   PEER_BEFORE_BIN  a second build's bin directory (its vgpud and vgpu-run), measured beside as "before"
set -eu
VGPU_BIN=${VGPU_BIN:-build/bin}
BENCH_BIN=${BENCH_BIN:-build/benchmarks}
PEER_PROG=${PEER_PROG:-bench_peer}
BENCH_OUT=${BENCH_OUT:-build/benchmarks/results}/${PEER_PROG#bench_}
PEER_MAX=${PEER_MAX:-$((256 << 20))}
mkdir -p "$BENCH_OUT"
rm -f "$BENCH_OUT"/*.res
pid=
stop() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; pid=; }
trap stop EXIT
vgpu() { # config name, bin directory
    local sock=$BENCH_OUT/$1.sock
    "$2/vgpud" --foreground --executor cuda --log-level warn --socket "$sock" >"$BENCH_OUT/vgpud-$1.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
    "$2/vgpu-run" --socket "$sock" --vgpu device=0 --vgpu device=1 -- "$BENCH_BIN/$PEER_PROG" "$PEER_MAX" >"$BENCH_OUT/$1.res"
    stop
}
"$BENCH_BIN/$PEER_PROG" "$PEER_MAX" >"$BENCH_OUT/native.res"
vgpu vgpu "$VGPU_BIN"
cfgs="native vgpu"
if [ -n "${PEER_BEFORE_BIN:-}" ]; then vgpu before "$PEER_BEFORE_BIN"; cfgs="$cfgs before"; fi
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x $(nvidia-smi -L | wc -l)"
python3 - "$BENCH_OUT" $cfgs <<'PY'
import sys, os
d, cfgs = sys.argv[1], sys.argv[2:]
res = {c: {} for c in cfgs}
for c in cfgs:
    for line in open(os.path.join(d, c + ".res")):
        p = line.split()
        if len(p) >= 4 and p[0] == "RESULT":
            res[c][p[1]] = (float(p[2]), p[3])
print("%-24s" % "figure" + "".join("%12s" % c for c in cfgs) + "   ratios to native")
for k, (v, unit) in res["native"].items():
    row = [res[c].get(k, (float("nan"), unit))[0] for c in cfgs]
    print("%-24s" % k + "".join("%12.2f" % x for x in row) + "   " +
          " ".join("%.3f" % (x / v) if v else "-" for x in row[1:]) + " (%s)" % unit)
PY
