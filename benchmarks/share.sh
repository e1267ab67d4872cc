#!/bin/bash
# How vGPUs share one GPU: clients running spin kernels of different lengths (bench_share), each
# through its own vGPU, under vgpud's FIFO, Credit and BAND schedulers (and natively, where the
# driver time-slices the contexts itself). Writes raw per-client outputs under BENCH_OUT/RUN/ and
# a summary from benchmarks/share_report.py. Needs an NVIDIA GPU.
#   VGPU_BIN     vgpud, vgpu-run, vgpuctl (default build/bin)
#   BENCH_BIN    bench_share and bench_launch (default build/benchmarks)
#   BENCH_SPIN   the spin kernel's fatbin (default build/benchmarks/spin.fatbin)
#   BENCH_MODULE fatbin holding the `empty` kernel, for the launch-rate comparison
#   BENCH_OUT    where results go (default build/benchmarks/share)
#   SHARE_PARTS  which parts run (default "two four eight launch")
#   SHARE_SECONDS measured seconds per run (default 20)
#   SHARE_EXECUTOR vgpud executor (default cuda; emu with BENCH_SPIN=basic.emu.so tries the script)
#   SHARE_POLICIES which policies run (default "native fifo credit band")
#   SHARE_VGPUD_OPTS more vgpud options for every run (to compare settings)
set -eu
VGPU_BIN=${VGPU_BIN:-build/bin}
BENCH_BIN=${BENCH_BIN:-build/benchmarks}
BENCH_SPIN=${BENCH_SPIN:-build/benchmarks/spin.fatbin}
BENCH_MODULE=${BENCH_MODULE:-build/tests/kernels/basic.fatbin}
BENCH_OUT=${BENCH_OUT:-build/benchmarks/share}
SHARE_PARTS=${SHARE_PARTS:-two four eight launch}
SECONDS_MEASURED=${SHARE_SECONDS:-20}
EXECUTOR=${SHARE_EXECUTOR:-cuda}
POLICIES=" ${SHARE_POLICIES:-native fifo credit band} "
# shellcheck disable=SC2206
MORE_OPTS=(${SHARE_VGPUD_OPTS:-})
wanted() { case $POLICIES in *" $1 "*) return 0 ;; esac; return 1; }
mkdir -p "$BENCH_OUT/bin"
. "$(dirname "$0")/../tools/vgpud-background.sh"
trap stop_vgpud EXIT
sock=$(mktemp -u /tmp/vgpud-share.XXXXXX)

# Clients are told apart by program name (vgpud --weight NAME=W): one link per client.
client_bin() {
    ln -sf "$(realpath "$BENCH_BIN/bench_share")" "$BENCH_OUT/bin/$1"
    echo "$BENCH_OUT/bin/$1"
}

# run NAME POLICY CLIENT... ; CLIENT = name:kernel_us:start_s:seconds:weight; POLICY native runs
# the clients on the machine's driver directly.
run() {
    local name=$1 policy=$2; shift 2
    [ "$policy" != native ] || [ "$EXECUTOR" = cuda ] || return 0
    wanted "$policy" || return 0
    local dir="$BENCH_OUT/$name" weights=() pids=() spec
    rm -rf "$dir"; mkdir -p "$dir"
    for spec in "$@"; do
        IFS=: read -r c k st sec w <<<"$spec"
        weights+=(--weight "$c=$w")
        echo "client $c $k $st $sec $w" >>"$dir/meta"
    done
    echo "policy $policy" >>"$dir/meta"
    if [ "$policy" != native ]; then
        start_vgpud "$VGPU_BIN" "$sock" "$dir/vgpud.log" "$EXECUTOR" info --sched "$policy" "${weights[@]}" "${MORE_OPTS[@]}"
    fi
    local epoch; epoch=$(date +%s%N)
    echo "epoch $epoch" >>"$dir/meta"
    echo "== $(date +%T) $name ($policy): $*" >&2
    # vgpud's own account of each vGPU's GPU time, every second (what its scheduler charges).
    local sampler=
    if [ "$policy" != native ]; then
        (while :; do echo "T $(date +%s%N)"; "$VGPU_BIN/vgpuctl" --socket "$sock" --json || break; sleep 1; done) \
            >"$dir/samples" 2>/dev/null &
        sampler=$!
    fi
    for spec in "$@"; do
        IFS=: read -r c k st sec w <<<"$spec"
        local exe; exe=$(client_bin "$c")
        (
            sleep "$st"
            if [ "$policy" = native ]; then
                "$exe" "$BENCH_SPIN" "$k" --seconds "$sec" --epoch "$epoch"
            else
                "$VGPU_BIN/vgpu-run" --socket "$sock" -- "$exe" "$BENCH_SPIN" "$k" --seconds "$sec" --epoch "$epoch"
            fi
        ) >"$dir/$c.out" 2>"$dir/$c.err" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    if [ -n "$sampler" ]; then kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true; fi
    if [ "$policy" != native ]; then
        stop_vgpud
        VGPUD_PID=
    fi
}

# Eight clients with the same fixed work, started together: finish times.
run_fixed() {
    local name=$1 policy=$2 n=8 kernels=2000 k=500
    [ "$policy" != native ] || [ "$EXECUTOR" = cuda ] || return 0
    local dir="$BENCH_OUT/$name" pids=()
    wanted "$policy" || return 0
    rm -rf "$dir"; mkdir -p "$dir"
    echo "policy $policy" >"$dir/meta"
    echo "fixed $n $kernels $k" >>"$dir/meta"
    [ "$policy" = native ] || start_vgpud "$VGPU_BIN" "$sock" "$dir/vgpud.log" "$EXECUTOR" info --sched "$policy" "${MORE_OPTS[@]}"
    echo "== $(date +%T) $name ($policy): $n clients x $kernels kernels of $k us" >&2
    for i in $(seq $n); do
        local exe; exe=$(client_bin "fixed$i")
        if [ "$policy" = native ]; then
            "$exe" "$BENCH_SPIN" "$k" --kernels "$kernels" >"$dir/fixed$i.out" 2>"$dir/fixed$i.err" &
        else
            "$VGPU_BIN/vgpu-run" --socket "$sock" -- "$exe" "$BENCH_SPIN" "$k" --kernels "$kernels" \
                >"$dir/fixed$i.out" 2>"$dir/fixed$i.err" &
        fi
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    if [ "$policy" != native ]; then stop_vgpud; VGPUD_PID=; fi
}

S=$SECONDS_MEASURED
for part in $SHARE_PARTS; do
    case $part in
    two) # Gdev's Figure 14: short tasks, then long tasks from 3 s on; equal weights and 30:70
        for policy in native fifo credit band; do
            run "two-equal-$policy" "$policy" "a:50:0:$((S + 3)):100" "b:2000:3:$S:100"
        done
        for policy in fifo credit band; do
            run "two-30-70-$policy" "$policy" "a:50:0:$((S + 3)):30" "b:2000:3:$S:70"
        done ;;
    four) # four vGPUs, staggered starts 2 s apart, all busy for S seconds
        for policy in native fifo credit band; do
            run "four-$policy" "$policy" "a:50:0:$((S + 6)):100" "b:200:2:$((S + 4)):100" \
                "c:1000:4:$((S + 2)):100" "d:2000:6:$S:100"
        done ;;
    eight)
        for policy in native fifo band; do run_fixed "eight-$policy" "$policy"; done ;;
    launch) # a launch-heavy client alone, scheduler off and on
        dir="$BENCH_OUT/launch"; rm -rf "$dir"; mkdir -p "$dir"
        for round in 1 2 3; do
            for policy in none band; do
                start_vgpud "$VGPU_BIN" "$sock" "$dir/vgpud.log" "$EXECUTOR" info --sched "$policy"
                "$VGPU_BIN/vgpu-run" --socket "$sock" -- "$BENCH_BIN/bench_launch" "$BENCH_MODULE" >>"$dir/$policy.out"
                stop_vgpud; VGPUD_PID=
            done
        done ;;
    *) echo "share.sh: unknown part $part" >&2; exit 2 ;;
    esac
done
if command -v python3 >/dev/null; then
    python3 "$(dirname "$0")/share_report.py" "$BENCH_OUT" | tee "$BENCH_OUT/summary.txt"
fi
