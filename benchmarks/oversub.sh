#!/bin/bash
# Oversubscribed device memory: vgpud swapping the memory of vGPUs that are not running (Gdev §4.3).
# Needs an NVIDIA GPU. Results: RESULT lines in BENCH_OUT/<part>/*.out and a summary in
# BENCH_OUT/summary.txt.
#   bandwidth  moving a tenant's memory out for another and back, to host swap and to the device swap
#              area, beside this machine's pinned copy bandwidth (bench_swap bandwidth)
#   oversub    OVERSUB_TENANTS training-like tenants (bench_swap task) whose memory together is
#              OVERSUB_FACTOR times the GPU's: one after another, then all at once through vGPUs
#              (the makespans), and all at once natively (where those beyond the GPU's memory fail)
#   gdev12     Gdev's Figure 12: one large tenant of high priority beside N small ones, N growing, with
#              and without a device swap area: the large one's time and the makespan
#   VGPU_BIN, BENCH_BIN, BENCH_MODULE (the fatbin with add_u32), BENCH_OUT: as in run.sh
#   OVERSUB_PARTS (default "bandwidth oversub gdev12"), SWAP_BW_MIB (default 2048),
#   OVERSUB_TENANTS (4), OVERSUB_FACTOR (1.5), OVERSUB_STEPS (400), OVERSUB_THINK_MS (20),
#   OVERSUB_VGPUD_OPTS (more vgpud options), OVERSUB_SEQUENTIAL_S (a makespan one after another
#   measured before: not run again), OVERSUB_NATIVE (1: also natively, all at once and what fits),
#   GDEV_LARGE_MIB (40960), GDEV_SMALL_MIB (8192), GDEV_SMALL_COUNTS ("0 2 4 6 8"), GDEV_STEPS (200)
set -eu
VGPU_BIN=${VGPU_BIN:-build/bin}
BENCH_BIN=${BENCH_BIN:-build/benchmarks}
BENCH_MODULE=${BENCH_MODULE:-build/tests/kernels/basic.fatbin}
BENCH_OUT=${BENCH_OUT:-build/benchmarks/oversub}
PARTS=" ${OVERSUB_PARTS:-bandwidth oversub gdev12} "
part() { case $PARTS in *" $1 "*) return 0 ;; esac; return 1; }
. "$(dirname "$0")/../tools/vgpud-background.sh"
trap stop_vgpud EXIT
sock=$(mktemp -u /tmp/vgpud-oversub.XXXXXX)
mkdir -p "$BENCH_OUT"
SUMMARY=$BENCH_OUT/summary.txt
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
result() { sed -n "s/^RESULT $2 \([0-9.]*\).*/\1/p" "$1" | tail -1; }
gpu_mib() { nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1; }
TASK=$BENCH_BIN/bench_swap

# run_tasks PREFIX MODE SPEC...: SPEC = name:MiB:steps; MODE native, vgpu or sequential (vgpu, one at
# a time). Prints the makespan; each task's output is PREFIX-name.out.
run_tasks() {
    local dir=$1 mode=$2; shift 2
    local t0 pids=() spec name mib steps
    t0=$(now)
    for spec in "$@"; do
        IFS=: read -r name mib steps _ <<<"$spec"
        local cmd=("$BENCH_BIN/bench_swap" task "$mib" "$steps" "${OVERSUB_THINK_MS:-20}" "$BENCH_MODULE")
        [ "$mode" = native ] || cmd=("$VGPU_BIN/vgpu-run" --socket "$sock" -- "${cmd[@]}")
        if [ "$mode" = sequential ]; then
            "${cmd[@]}" >"$dir-$name.out" 2>&1 || true
        else
            "${cmd[@]}" >"$dir-$name.out" 2>&1 &
            pids+=($!)
        fi
    done
    for p in "${pids[@]}"; do wait "$p" || true; done
    elapsed "$t0" "$(now)"
}
failures() { grep -L "^RESULT task_wall" "$1"-*.out | wc -l; }

if part bandwidth; then
    mib=${SWAP_BW_MIB:-2048}
    # vgpud lets a vGPU keep memory it was granted for four times what moving it out would take
    # (at first 4 GB/s): the measured tenant idles past that before the other comes.
    idle=$((mib / 1024 + 2))
    d=$BENCH_OUT/bandwidth
    mkdir -p "$d"
    "$TASK" bandwidth "$mib" "$BENCH_MODULE" >"$d/native.out"
    start_vgpud "$VGPU_BIN" "$sock" "$d/vgpud-host.log" cuda info --swap-host $((2 * mib))M \
        --swap-capacity $((mib + 512))M --swap-reserve 0
    "$VGPU_BIN/vgpu-run" --socket "$sock" -- "$TASK" bandwidth "$mib" "$BENCH_MODULE" "$idle" >"$d/host.out"
    stop_vgpud
    start_vgpud "$VGPU_BIN" "$sock" "$d/vgpud-device.log" cuda info --swap-host $((2 * mib))M \
        --swap-device "${mib}M" --swap-capacity $((2 * mib + 512))M --swap-reserve 0
    "$VGPU_BIN/vgpu-run" --socket "$sock" -- "$TASK" bandwidth "$mib" "$BENCH_MODULE" "$idle" >"$d/device.out"
    stop_vgpud
    say "swap bandwidth, $mib MiB moved out for another tenant and back (GB/s):"
    say "  pinned copies (native): device to host $(result "$d/native.out" pinned_dtoh), host to device $(result "$d/native.out" pinned_htod)"
    say "  pinned copies (vGPU):   device to host $(result "$d/host.out" pinned_dtoh), host to device $(result "$d/host.out" pinned_htod)"
    say "  host swap:   out $(result "$d/host.out" swap_out) ($(result "$d/host.out" make_room_ms) ms), in $(result "$d/host.out" swap_in) ($(result "$d/host.out" come_back_ms) ms)"
    say "  device swap: out $(result "$d/device.out" swap_out) ($(result "$d/device.out" make_room_ms) ms), in $(result "$d/device.out" swap_in) ($(result "$d/device.out" come_back_ms) ms)"
fi

if part oversub; then
    n=${OVERSUB_TENANTS:-4}
    total=$(gpu_mib)
    each=$(awk -v t="$total" -v f="${OVERSUB_FACTOR:-1.5}" -v n="$n" 'BEGIN { printf "%d", t * f / n / 256 * 256 }')
    steps=${OVERSUB_STEPS:-400}
    specs=()
    for i in $(seq "$n"); do specs+=("t$i:$each:$steps"); done
    d=$BENCH_OUT/oversub
    mkdir -p "$d"
    # shellcheck disable=SC2086 # OVERSUB_VGPUD_OPTS: extra options, split on purpose
    start_vgpud "$VGPU_BIN" "$sock" "$d/vgpud.log" cuda debug --swap-host $((n * each))M ${OVERSUB_VGPUD_OPTS:-}
    say "oversubscription: $n tenants of $each MiB ($(awk -v a="$each" -v n="$n" -v t="$total" 'BEGIN { printf "%.2f", a * n / t }')x the GPU's $total MiB), $steps steps of ${OVERSUB_THINK_MS:-20} ms besides the GPU's work each${OVERSUB_VGPUD_OPTS:+, vgpud $OVERSUB_VGPUD_OPTS}:"
    seq_s=${OVERSUB_SEQUENTIAL_S:-}
    if [ -z "$seq_s" ]; then
        seq_s=$(run_tasks "$d/sequential" sequential "${specs[@]}")
        say "  through vGPUs, one after another: $seq_s s ($(failures "$d/sequential") failed)"
    else
        say "  through vGPUs, one after another: $seq_s s (given)"
    fi
    par_s=$(run_tasks "$d/vgpu" vgpu "${specs[@]}")
    "$VGPU_BIN/vgpuctl" --socket "$sock" status >"$d/vgpuctl.txt" || true
    stop_vgpud
    say "  through vGPUs, all at once:       $par_s s ($(failures "$d/vgpu") failed); $(awk -v a="$seq_s" -v b="$par_s" 'BEGIN { printf "%.2f", a / b }')x faster than one after another"
    if [ "${OVERSUB_NATIVE:-1}" = 1 ]; then
        nat_s=$(run_tasks "$d/native" native "${specs[@]}")
        say "  natively, all at once:            $nat_s s ($(failures "$d/native") of $n failed)"
        # The best a GPU shared natively does without swapping: as many at once as fit, then the next.
        fit=$(awk -v t="$total" -v e="$each" 'BEGIN { k = int(t / e); print k < 1 ? 1 : k }')
        t0=$(now)
        for ((i = 0; i < n; i += fit)); do run_tasks "$d/native-batch$i" native "${specs[@]:i:fit}" >/dev/null; done
        bat_s=$(elapsed "$t0" "$(now)")
        say "  natively, $fit at a time:            $bat_s s ($(cat "$d"/native-batch*-*.out | grep -c "^RESULT task_wall") of $n finished)"
    fi
fi

if part gdev12; then
    large=${GDEV_LARGE_MIB:-40960} small=${GDEV_SMALL_MIB:-8192} steps=${GDEV_STEPS:-200}
    say "Gdev Figure 12 analogue: a $large MiB tenant of weight 400 beside N of $small MiB (weight 100), $steps steps each:"
    say "  N   device swap   large s   makespan s   failed"
    for swapdev in 0 10%; do
        for k in ${GDEV_SMALL_COUNTS:-0 2 4 6 8}; do
            d=$BENCH_OUT/gdev12-swap${swapdev%\%}-n$k
            mkdir -p "$d"
            opts=(--swap-host $(((large + k * small) * 2))M --weight bench_swap_large=400)
            [ "$swapdev" = 0 ] || opts+=(--swap-device "$swapdev")
            start_vgpud "$VGPU_BIN" "$sock" "$d/vgpud.log" cuda info "${opts[@]}"
            ln -sf "$(realpath "$BENCH_BIN/bench_swap")" "$d/bench_swap_large"
            t0=$(now)
            "$VGPU_BIN/vgpu-run" --socket "$sock" -- "$d/bench_swap_large" task "$large" "$steps" \
                "${OVERSUB_THINK_MS:-20}" "$BENCH_MODULE" >"$d/large.out" 2>&1 &
            lp=$!
            smalls=()
            for i in $(seq "$k"); do
                "$VGPU_BIN/vgpu-run" --socket "$sock" -- "$BENCH_BIN/bench_swap" task "$small" "$steps" \
                    "${OVERSUB_THINK_MS:-20}" "$BENCH_MODULE" >"$d/small$i.out" 2>&1 &
                smalls+=($!)
            done
            wait "$lp" || true
            for p in "${smalls[@]}"; do wait "$p" || true; done
            span=$(elapsed "$t0" "$(now)")
            stop_vgpud
            say "  $k   $swapdev   $(result "$d/large.out" task_wall)   $span   $(grep -L '^RESULT task_wall' "$d"/*.out | wc -l)"
        done
    done
fi
