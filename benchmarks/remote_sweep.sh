#!/bin/bash
# Copies to and from a remote vGPU under several vgpud configurations, in alternating rounds so that
# a drift of the host (another job, the clock) falls on every configuration alike, with the raw
# link's cold copies measured in each round beside them. Two vgpuds on this host (vgpud_pair.sh),
# UCX_TLS as set (default tcp). Prints each round's figures and, at the end, each configuration's
# median of every figure and its ratio to the raw link's median in the same direction and size.
#   SWEEP_CONFIGS  NAME=WORDS ..., WORDS comma-separated: vgpud's options, and VAR=VALUE words that
#                  set VAR in that pair's environment (default: vgpud's defaults, 256 KiB pieces
#                  four and eight pulled at once, 512 KiB pieces, and UCX's rendezvous by active
#                  messages)
#   SWEEP_ROUNDS   rounds (default 3); SWEEP_DEADLINE seconds after which no round starts (default 0: none)
#   SWEEP_SIZES    "MAX MIN" for bench_copy (default "4194304 1048576")
#   VGPU_BIN, BENCH_BIN, BENCH_OUT as for run.sh; SWEEP_EXECUTOR cuda (default) or emu
set -eu
VGPU_BIN=${VGPU_BIN:-build/bin}
BENCH_BIN=${BENCH_BIN:-build/benchmarks}
BENCH_OUT=${BENCH_OUT:-build/benchmarks/results}/sweep
CONFIGS=${SWEEP_CONFIGS:-"base= p256q4=--remote-piece,256K,--remote-pulls,4 p256q8=--remote-piece,256K,--remote-pulls,8 p512=--remote-piece,512K am=UCX_TCP_PUT_ENABLE=n"}
ROUNDS=${SWEEP_ROUNDS:-3}
DEADLINE=${SWEEP_DEADLINE:-0}
read -r MAX MIN <<<"${SWEEP_SIZES:-4194304 1048576}"
EXECUTOR=${SWEEP_EXECUTOR:-cuda}
export UCX_TLS=${UCX_TLS:-tcp}
mkdir -p "$BENCH_OUT"
rm -f "$BENCH_OUT"/*.res
gpus=$([ "$EXECUTOR" = cuda ] && nvidia-smi -L | wc -l || echo 1)
PAIR_DIR=$BENCH_OUT PAIR_LOGS=$BENCH_OUT/vgpud PAIR_EXECUTOR=$EXECUTOR PAIR_LEVEL=warn PAIR_GPUS=$gpus
. "$(dirname "$0")/vgpud_pair.sh"
command -v lscpu >/dev/null && lscpu | grep -i 'numa\|model name' || true
start=$SECONDS
for round in $(seq "$ROUNDS"); do
    if [ "$DEADLINE" -gt 0 ] && [ $((SECONDS - start)) -ge "$DEADLINE" ]; then
        echo "deadline: $((round - 1)) round(s)"; break
    fi
    LINK_RAW_COLD_MIB=1024 "$BENCH_BIN/link_raw" 2000 "$MAX" | awk -v r="$round" '$1 == "RESULT" && $2 !~ /longest/ {print r, "raw", $2, $3}' |
        tee -a "$BENCH_OUT/all.res"
    for c in $CONFIGS; do
        name=${c%%=*} opts=() envs=()
        IFS=, read -r -a words <<<"${c#*=}"
        for w in "${words[@]}"; do
            if [[ $w =~ ^[A-Z_][A-Z0-9_]*= ]]; then envs+=("$w"); else opts+=("$w"); fi
        done
        for e in "${envs[@]}"; do export "${e?}"; done
        pair_start "${opts[@]}"
        for e in "${envs[@]}"; do unset "${e%%=*}"; done
        "$VGPU_BIN/vgpu-run" --socket "$BENCH_OUT/a.sock" --vgpu node=b,device=0 -- "$BENCH_BIN/bench_copy" "$MAX" "$MIN" |
            awk -v r="$round" -v n="$name" '$1 == "RESULT" {print r, n, $2, $3}' | tee -a "$BENCH_OUT/all.res"
    done
    pair_stop
done
# Each configuration's median of each figure, and its ratio to the raw link's cold median of the
# same direction and size (htod against raw_copy_cold, dtoh against raw_copy_back_cold).
awk '
function med(k,   n, i, j, t, a) {
    n = split(vals[k], a, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j] + 0 < a[j - 1] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{ k = $2 " " $3; vals[k] = vals[k] " " $4; if (!(k in seen)) { seen[k] = 1; order[++m] = k } }
END {
    for (i = 1; i <= m; i++) {
        split(order[i], p, " "); v = med(order[i]); ratio = ""
        if (p[1] != "raw" && match(p[2], /_[0-9]+$/)) {
            size = substr(p[2], RSTART + 1) + 0
            unit = size >= 1048576 ? (size / 1048576) "MiB" : (size / 1024) "KiB"
            raw = "raw raw_copy" (p[2] ~ /^dtoh/ ? "_back" : "") "_cold_" unit
            if (raw in vals) ratio = sprintf("  %.2f of raw", v / med(raw))
        }
        printf "MEDIAN %-8s %-32s %7.3f GB/s%s\n", p[1], p[2], v, ratio
    }
}' "$BENCH_OUT/all.res"
