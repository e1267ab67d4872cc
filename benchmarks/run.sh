#!/bin/bash
# Native vs vGPU, side by side in one run: every benchmark runs once against the machine's own
# driver and once through vgpu-run against a vgpud with the cuda executor, then the two are
# printed together with their ratio. Needs an NVIDIA GPU.
#   VGPU_BIN     directory of vgpud, vgpu-run (default build/bin)
#   BENCH_BIN    directory of the benchmark programs (default build/benchmarks)
#   BENCH_MODULE fatbin holding the `empty` kernel
#   BENCH_PYTHON a Python with PyTorch, for bench_pytorch.py (default python3; skipped without torch)
#   BENCH_APPS   directory of the application suite's binaries (default build/apps)
#   BENCH_OUT    where to write the raw and combined results (default build/benchmarks/results)
#   BENCH_ROUNDS how many times each pair runs, alternating native and vGPU (default 3); each side
#                keeps its best figure (lowest latency, highest rate or bandwidth), which shields
#                the comparison from a noisy neighbour on the machine
#   BENCH_SPIN   fatbin holding the `spin` kernel, for the switch part (default build/benchmarks/spin.fatbin)
#   BENCH_LIBRARY library-sized fatbin holding the `first` kernel (default build/benchmarks/library.fatbin)
#   BENCH_PARTS  which parts run (default "apps pytorch latency launch graph copy alloc first library switch tenant")
#   BENCH_VGPUD_OPTS more vgpud options (to compare settings, e.g. "--sched none")
#   BENCH_COPY_SIZES the copy part's largest and smallest sizes (default "268435456 4096"; e.g.
#                "1048576 4096" for many rounds of the small copies only)
set -eu
VGPU_BIN=${VGPU_BIN:-build/bin}
BENCH_BIN=${BENCH_BIN:-build/benchmarks}
BENCH_MODULE=${BENCH_MODULE:-build/tests/kernels/basic.fatbin}
BENCH_OUT=${BENCH_OUT:-build/benchmarks/results}
BENCH_ROUNDS=${BENCH_ROUNDS:-3}
BENCH_PARTS=" ${BENCH_PARTS:-apps pytorch latency launch graph copy alloc first library switch tenant} "
part() { case $BENCH_PARTS in *" $1 "*) return 0 ;; esac; return 1; }
mkdir -p "$BENCH_OUT"
sock=$(mktemp -u /tmp/vgpud-bench.XXXXXX)
. "$(dirname "$0")/../tools/vgpud-background.sh"
trap stop_vgpud EXIT
# shellcheck disable=SC2086
start_vgpud "$VGPU_BIN" "$sock" "$BENCH_OUT/vgpud.log" cuda warn ${BENCH_VGPUD_OPTS:-}

run_pair() { # name, program and arguments
    name=$1; shift
    : >"$BENCH_OUT/$name.native"
    : >"$BENCH_OUT/$name.vgpu"
    for round in $(seq "$BENCH_ROUNDS"); do
        echo "== $name, round $round: native" >&2
        "$@" >>"$BENCH_OUT/$name.native"
        echo "== $name, round $round: vgpu" >&2
        wait_vgpud_idle "$VGPU_BIN" "$sock"
        "$VGPU_BIN/vgpu-run" --socket "$sock" -- "$@" >>"$BENCH_OUT/$name.vgpu"
    done
}

# The application suite (static cudart, nvcc's default): each program's wall time, and for those
# that time their own kernel phase (APPS_VERBOSE), that phase too. The compute-heavy ones run at
# their --bench sizes.
APPS=${BENCH_APPS:-build/apps}
APP_NAMES=
if part apps; then APP_NAMES=${BENCH_APP_NAMES:-$(cd "$APPS" && ls *.static | sed 's/\.static$//')}; fi
APP_BENCH_SIZES=" matrix_mul black_scholes binomial_options vector_add "
app_once() { # results file, app name, command...
    local res=$1 name=$2; shift 2
    local t0 t1
    t0=$(date +%s%N)
    if ! APPS_VERBOSE=1 "$@" >/dev/null 2>"$BENCH_OUT/app.stderr"; then
        echo "$name failed:" >&2; cat "$BENCH_OUT/app.stderr" >&2; return 1
    fi
    t1=$(date +%s%N)
    echo "RESULT app_${name}_wall $(( (t1 - t0) / 1000 )) us" >>"$res"
    sed -n 's/^\[time\] [^:]*: \([0-9.]*\) ms.*/\1/p' "$BENCH_OUT/app.stderr" | head -1 |
        awk -v n="$name" '{ printf "RESULT app_%s_kernels %d us\n", n, $1 * 1000 }' >>"$res"
}
: >"$BENCH_OUT/apps.native"
: >"$BENCH_OUT/apps.vgpu"
for name in $APP_NAMES; do
    args=(); case $APP_BENCH_SIZES in *" $name "*) args=(--bench) ;; esac
    for round in $(seq "$BENCH_ROUNDS"); do
        echo "== app $name ${args[*]:-}, round $round" >&2
        app_once "$BENCH_OUT/apps.native" "$name" "$APPS/$name.static" "${args[@]}"
        wait_vgpud_idle "$VGPU_BIN" "$sock"
        app_once "$BENCH_OUT/apps.vgpu" "$name" "$VGPU_BIN/vgpu-run" --socket "$sock" -- "$APPS/$name.static" "${args[@]}"
    done
done

# PyTorch, where it is installed (BENCH_PYTHON).
PYTHON=${BENCH_PYTHON:-python3}
summaries=""
part apps && summaries="apps"
if part pytorch && "$PYTHON" -c "import torch" >/dev/null 2>&1; then
    run_pair pytorch "$PYTHON" "$(dirname "$0")/bench_pytorch.py"
    summaries="$summaries pytorch"
fi

# The best of the rounds for every metric: the smallest time, the largest rate or bandwidth.
best() {
    awk '/^RESULT/ { k = $2; v = $3; u = $4; lower = (u == "us" || u == "ms");
                     if (!(k in b) || (lower ? v < b[k] : v > b[k])) b[k] = v; unit[k] = u }
         END { for (k in b) print k, b[k], unit[k] }' "$1"
}

# The median of the rounds, beside the best: a noisy machine moves the best of a few rounds more.
median() {
    awk '/^RESULT/ { n[$2]++; v[$2, n[$2]] = $3 }
         END { for (k in n) { m = n[k]; for (i = 1; i <= m; i++) a[i] = v[k, i];
                 for (i = 2; i <= m; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
                 print k, (m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2) } }' "$1"
}

for p in latency launch graph copy alloc; do
    if part $p; then
        case $p in
        launch | graph) run_pair $p "$BENCH_BIN/bench_$p" "$BENCH_MODULE" ;;
        # shellcheck disable=SC2086
        copy) run_pair $p "$BENCH_BIN/bench_$p" ${BENCH_COPY_SIZES:-} ;;
        *) run_pair $p "$BENCH_BIN/bench_$p" ;; esac
        summaries="$summaries $p"
    fi
done
# A new process's first kernel: natively the driver initialises; through a vGPU a pooled worker
# whose driver is initialised already serves it.
if part first; then
    run_pair first "$BENCH_BIN/bench_first" "$BENCH_MODULE"
    summaries="$summaries first"
fi
# The first use of a kernel of a large library (the image travels to the worker).
if part library; then
    run_pair library "$BENCH_BIN/bench_library" "${BENCH_LIBRARY:-build/benchmarks/library.fatbin}"
    summaries="$summaries library"
fi

# What a switch between two processes' contexts costs the GPU (natively: the driver's time slices;
# through vGPUs: a hand-over between two vGPUs, which vgpud's quantum pays for).
if part switch; then
    run_pair switch "$BENCH_BIN/bench_switch" "${BENCH_SPIN:-build/benchmarks/spin.fatbin}" 50 4 400
    summaries="$summaries switch"
fi

# What a tenant costs: its worker's resident memory (idle in the pool, and serving one context),
# and the device memory of a process with one context, natively and as a worker.
if part tenant; then
    gpu_mem_of() { nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
        awk -F', *' -v p="$1" '$1 == p { print $2 }'; }
    "$BENCH_BIN/bench_first" "$BENCH_MODULE" 4 >/dev/null & np=$!
    sleep 2.5
    native_mib=$(gpu_mem_of $np); wait $np
    wait_vgpud_idle "$VGPU_BIN" "$sock"
    "$VGPU_BIN/vgpu-run" --socket "$sock" -- "$BENCH_BIN/bench_first" "$BENCH_MODULE" 4 >/dev/null & vp=$!
    sleep 2.5
    st=$("$VGPU_BIN/vgpuctl" --socket "$sock" --json)
    wpid=$(echo "$st" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(next((w["pid"] for w in j["workers"] if w["phase"] == "serving"), 0))')
    serving_rss=$(echo "$st" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(next((w["rss_bytes"] for w in j["workers"] if w["phase"] == "serving"), 0))')
    pooled_rss=$(echo "$st" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(next((w["rss_bytes"] for w in j["workers"] if w["phase"] == "pooled"), 0))')
    pooled_pid=$(echo "$st" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(next((w["pid"] for w in j["workers"] if w["phase"] == "pooled"), 0))')
    worker_mib=$(gpu_mem_of $wpid)
    pooled_mib=$(gpu_mem_of $pooled_pid)
    wait $vp
    {
        echo "TENANT native process with one context: ${native_mib:-?} MiB of device memory"
        echo "TENANT worker serving one context: ${worker_mib:-?} MiB of device memory, $((serving_rss >> 20)) MiB resident"
        echo "TENANT pooled worker (driver open, no tenant): ${pooled_mib:-?} MiB of device memory, $((pooled_rss >> 20)) MiB resident"
    } | tee "$BENCH_OUT/tenant.txt"
fi

{
    echo "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo unknown)"
    echo "date:   $(date -u +%Y-%m-%dT%H:%MZ), best of $BENCH_ROUNDS alternating rounds (and the ratio of their medians)"
    printf '%-32s %18s %18s %9s %9s\n' metric native vgpu vgpu/native medians
    for f in $summaries; do
        join -j 1 <(best "$BENCH_OUT/$f.native" | sort -k1,1) \
                  <(best "$BENCH_OUT/$f.vgpu" | awk '{print $1, $2}' | sort -k1,1) |
        join -j 1 - <(join -j 1 <(median "$BENCH_OUT/$f.native" | sort -k1,1) <(median "$BENCH_OUT/$f.vgpu" | sort -k1,1)) |
        awk '{ printf "%-32s %10.3f %-7s %10.3f %-7s %8.3f %9.3f\n", $1, $2, $3, $4, $3, ($2 > 0 ? $4 / $2 : 0), ($5 > 0 ? $6 / $5 : 0) }' |
        sort -t_ -k1,2 -k3,3n
    done
} | tee "$BENCH_OUT/summary.txt"
