#!/bin/bash
# What vgpud's memory manager (swapping on) costs when everything fits, measured in pairs: two vgpuds
# run side by side, one without swap and one with `--swap-host`, and every round runs each workload
# natively and through both, the two vGPU runs seconds apart in alternating order. The ratio of a
# round's two vGPU figures is paired (same minute, same GPU clocks), so its median over many rounds
# is far quieter than comparing the best of separate runs. Needs an NVIDIA GPU.
#   Workloads: bench_alloc (allocation-heavy: cuMemAlloc/Free pairs of 4 KiB to 16 MiB, a thousand
#   held then freed, stream-ordered pairs), bench_launch (launch-heavy), and bench_swap task
#   (kernel-heavy: MANAGER_TASK_MIB of memory, a kernel over all of it per step, no CPU phase).
#   VGPU_BIN, BENCH_BIN, BENCH_MODULE, BENCH_OUT: as in run.sh
#   MANAGER_EXECUTOR (default cuda; emu tries the script without a GPU), MANAGER_ROUNDS (default 10), MANAGER_SWAP_OPTS (default "--swap-host 16G"),
#   MANAGER_TASK_MIB (default 8192), MANAGER_TASK_STEPS (default 200)
# Prints, per metric: native's median, each vGPU's median, and the paired ratio on/off (median,
# with the lowest and highest round), to BENCH_OUT/summary.txt; the paired medians as run.sh prints
# its ratios (BENCH_OUT/paired.summary), and their plot (manager.svg).
# `manager_cost.sh summarize` prints the summary of the rounds in BENCH_OUT again, running nothing.
set -eu
VGPU_BIN=${VGPU_BIN:-build/bin}
BENCH_BIN=${BENCH_BIN:-build/benchmarks}
BENCH_MODULE=${BENCH_MODULE:-build/tests/kernels/basic.fatbin}
BENCH_OUT=${BENCH_OUT:-build/benchmarks/manager}
ROUNDS=${MANAGER_ROUNDS:-10}
summarize() {
    {
        echo "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
        echo "date:   $(date -u +%Y-%m-%dT%H:%MZ), rounds in $BENCH_OUT; swap on: ${MANAGER_SWAP_OPTS:---swap-host 16G}"
        printf '%-24s %14s %14s %14s %9s %9s %s\n' metric native off on off/nat on/nat "on/off paired: median [lowest, highest]"
        awk -v out="$BENCH_OUT" '
            FNR == 1 { side = (FILENAME ~ /native$/) ? "n" : (FILENAME ~ /off$/) ? "f" : "o" }
            /^RESULT/ { v[side, $2, $5] = $3; unit[$2] = $4; k[$2] = 1; if ($5 > R) R = $5 }
            function med(a, m,   i, j, x) { for (i = 2; i <= m; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
                                           return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
            END {
                for (key in k) {
                    delete n; delete f; delete o; delete r; m = 0
                    for (i = 1; i <= R; i++) if ((("n", key, i) in v) && (("f", key, i) in v) && (("o", key, i) in v)) {
                        m++; n[m] = v["n", key, i]; f[m] = v["f", key, i]; o[m] = v["o", key, i]; r[m] = o[m] / f[m] }
                    if (!m) continue
                    mr = med(r, m); lo = r[1]; hi = r[m]
                    mn = med(n, m); mf = med(f, m); mo = med(o, m)
                    printf "%-24s %14.6g %14.6g %14.6g %9.3f %9.3f %.3f [%.3f, %.3f]\n", key, mn, mf, mo, mf / mn, mo / mn, mr, lo, hi
                    printf "%s %g %s %g %s %.3f %.3f\n", key, mf, unit[key], mo, unit[key], mr, mr >> (out "/paired.summary")
                }
            }' "$BENCH_OUT/native" "$BENCH_OUT/off" "$BENCH_OUT/on" | sort
    } | tee "$BENCH_OUT/summary.txt"
    python3 "$(dirname "$0")/ratio_plot.py" "$BENCH_OUT/manager.svg" "--ylabel=swap on / swap off" \
        "swap on / swap off, paired median of the rounds=$BENCH_OUT/paired.summary" >/dev/null 2>&1 || true
}
if [ "${1:-}" = summarize ]; then
    rm -f "$BENCH_OUT/paired.summary"
    summarize
    exit 0
fi

. "$(dirname "$0")/../tools/vgpud-background.sh"
mkdir -p "$BENCH_OUT"
sock_off=$(mktemp -u /tmp/vgpud-off.XXXXXX)
sock_on=$(mktemp -u /tmp/vgpud-on.XXXXXX)
start_vgpud "$VGPU_BIN" "$sock_off" "$BENCH_OUT/vgpud-off.log" "${MANAGER_EXECUTOR:-cuda}" warn
pid_off=$VGPUD_PID
# shellcheck disable=SC2086
start_vgpud "$VGPU_BIN" "$sock_on" "$BENCH_OUT/vgpud-on.log" "${MANAGER_EXECUTOR:-cuda}" warn ${MANAGER_SWAP_OPTS:---swap-host 16G}
pid_on=$VGPUD_PID
trap 'VGPUD_PID=$pid_off stop_vgpud; VGPUD_PID=$pid_on stop_vgpud' EXIT

workloads=(
    "$BENCH_BIN/bench_alloc"
    "$BENCH_BIN/bench_launch $BENCH_MODULE"
    "$BENCH_BIN/bench_swap task ${MANAGER_TASK_MIB:-8192} ${MANAGER_TASK_STEPS:-200} 0 $BENCH_MODULE"
)
# A task's wall time becomes a rate (tasks per second), so that every metric is higher-is-better.
results() { sed -n 's/^RESULT task_wall \([0-9.]*\) s/RESULT task_rate \1/p; /^RESULT [a-z_]* [0-9.]* [a-z/]*s$/p' |
            awk '$2 == "task_rate" { printf "RESULT task_rate %.6f tasks/s\n", 1 / $3; next } { print }'; }
through() { wait_vgpud_idle "$VGPU_BIN" "$1"; "$VGPU_BIN/vgpu-run" --socket "$1" -- "${@:2}"; }
: >"$BENCH_OUT/native"; : >"$BENCH_OUT/off"; : >"$BENCH_OUT/on"
for round in $(seq "$ROUNDS"); do
    for w in "${workloads[@]}"; do
        read -r -a cmd <<<"$w"
        echo "== round $round: ${cmd[0]##*/} ${cmd[1]:-}" >&2
        "${cmd[@]}" | results | sed "s/\$/ $round/" >>"$BENCH_OUT/native"
        if [ $((round % 2)) = 1 ]; then order="off on"; else order="on off"; fi
        for side in $order; do
            s=$sock_off; [ "$side" = on ] && s=$sock_on
            through "$s" "${cmd[@]}" | results | sed "s/\$/ $round/" >>"$BENCH_OUT/$side"
        done
    done
done
rm -f "$BENCH_OUT/paired.summary"
summarize
