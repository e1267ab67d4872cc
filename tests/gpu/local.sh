# Sourced by run.sh: the programs, the applications, several clients, faults, the frameworks,
# quotas and swapping on the vGPUs of one vgpud, each compared with its native run.
start_vgpud "$BIN" "$sock" "$OUT/vgpud.log" cuda info || exit 1

compare vecadd "$PROGS/prog_vecadd" "$K/basic.fatbin"
compare vecadd-zstd "$PROGS/prog_vecadd" "$K/basic.zstd.fatbin"
compare vecadd-lz4 "$PROGS/prog_vecadd" "$K/basic.lz4.fatbin"
compare vecadd-raw "$PROGS/prog_vecadd" "$K/basic.none.fatbin"
compare copies "$PROGS/prog_copies"
# Pinned buffers larger than the data area (32 MiB of these 40 are staging slots): spilled.
VGPU_DATA_AREA=40M compare copies-spilled "$PROGS/prog_copies" 16777216
compare memset "$PROGS/prog_memset"
compare hostfn "$PROGS/prog_hostfn"
compare pitch "$PROGS/prog_pitch"
compare copy3d "$PROGS/prog_copy3d"
compare queries "$PROGS/prog_queries"
compare stream_attrs "$PROGS/prog_stream_attrs"
compare coop "$PROGS/prog_coop" "$K/basic.fatbin"
compare memops "$PROGS/prog_memops"
compare link "$PROGS/prog_link" "$K"
compare library "$PROGS/prog_library" "$K/basic.fatbin"
compare graph "$PROGS/prog_graph" "$K/basic.fatbin"
compare graph_build "$PROGS/prog_graph_build" "$K/basic.fatbin"
compare graph_cond "$PROGS/prog_graph_cond" "$K/cond.fatbin"
compare graph_mem "$PROGS/prog_graph_mem"
compare capture_deps "$PROGS/prog_capture_deps" "$K/basic.fatbin"
compare register "$PROGS/prog_register"
compare host_pointer "$PROGS/prog_host_pointer" "$K/basic.fatbin"
compare vmm "$PROGS/prog_vmm"
compare vmm_stripe "$PROGS/prog_vmm_stripe" "$K/basic.fatbin"
compare tensor_map "$PROGS/prog_tensor_map"
compare pool "$PROGS/prog_pool"
# Two vGPUs of this node (of two GPUs where there are two): their copies run in the worker, and
# where the GPUs reach each other, a kernel of one reads the other's memory, as natively.
compare peer "$PROGS/prog_peer" "$K/basic.fatbin"
peer_dev=$(($(nvidia-smi -L | wc -l) > 1 ? 1 : 0))
in_worker() { # the copies were served as CopyPeer (once the session has ended), none refused
    for _ in $(seq 30); do
        "$BIN/vgpuctl" --socket "$sock" --json status | grep -q '"CopyPeer":{"calls":[1-9][0-9]*,"errors":0}' && return 0
        sleep 0.1
    done
    return 1
}
if "$BIN/vgpu-run" --socket "$sock" --vgpu device=0 --vgpu device=$peer_dev -- "$PROGS/prog_peer" "$K/basic.fatbin" \
    >"$OUT/peer-pair.vgpu" 2>&1 && in_worker
then pass "peer-pair: $(tail -1 "$OUT/peer-pair.vgpu"), copies device to device in the worker"
else fail "peer-pair"; sed 's/^/    /' "$OUT/peer-pair.vgpu"; fi
compare managed "$PROGS/prog_managed" "$K/basic.fatbin"
compare ipc "$PROGS/prog_ipc"
# A tenant on the second GPU opens the first's memory by its handle (peer access), as natively.
if [ "$(nvidia-smi -L | wc -l)" -gt 1 ]; then compare ipc_peer "$PROGS/prog_ipc" 1; fi
compare ipc_event "$PROGS/prog_ipc_event"
compare pool_ipc "$PROGS/prog_pool_ipc"
compare vmm_share "$PROGS/prog_vmm_share"
compare user_object "$PROGS/prog_user_object" "$K/basic.fatbin"
# The project's own API (Gdev's shared segments): through vGPUs only.
if "$BIN/vgpu-run" --socket "$sock" -- "$PROGS/prog_shm" >"$OUT/shm.vgpu" 2>&1; then pass "shm: $(tail -1 "$OUT/shm.vgpu")"
else fail "shm: failed"; sed 's/^/    /' "$OUT/shm.vgpu"; fi
# NVLinks shown (VGPU_NVLINK=1): the host's, as NVIDIA's NVML gives them.
VGPU_NVLINK=1 compare nvml "$PROGS/prog_nvml"
compare array "$PROGS/prog_array"
compare array_formats "$PROGS/prog_array_formats"
compare sparse "$PROGS/prog_sparse"
compare texture "$PROGS/prog_texture" "$K/texture.fatbin"
compare batch "$PROGS/prog_batch"
compare streams "$PROGS/prog_streams" "$K/basic.fatbin"
compare params "$PROGS/prog_params" "$K/basic.fatbin"
compare legacy_launch "$PROGS/prog_legacy_launch" "$K/basic.fatbin"
compare green "$PROGS/prog_green" "$K/basic.fatbin"
compare logs "$PROGS/prog_logs"
compare printf "$PROGS/prog_printf" "$K/basic.fatbin"
compare errors "$PROGS/prog_errors" "$K/basic.fatbin"
compare threads "$PROGS/prog_threads" "$K/basic.fatbin"
compare darkapi "$PROGS/prog_darkapi"

# The application suite (tests/apps), static and shared cudart builds: each as it runs natively,
# and the native output is the one recorded in tests/apps/expected (what the emu tests expect too).
for name in $APP_NAMES; do
    for kind in static shared; do
        by_design=$BY_DESIGN_DIR/$name.local compare "app-$name.$kind" "$APPS/$name.$kind"
        if [ -f "$APPS_EXPECTED/$name.out" ] && ! cmp -s "$APPS_EXPECTED/$name.out" "$OUT/app-$name.$kind.native"; then
            fail "app-$name.$kind: native output differs from $APPS_EXPECTED/$name.out"
            diff "$APPS_EXPECTED/$name.out" "$OUT/app-$name.$kind.native"
        fi
    done
done
# NCCL in one process over vGPUs with their NVLinks shown takes its peer-to-peer transport.
if [ -x "$APPS/nccl_collectives.static" ]; then VGPU_NVLINK=1 compare app-nccl-nvlink "$APPS/nccl_collectives.static"; fi

# The frontend against the toolkit's stub libcuda: every API name it exports resolves, and
# cuGetProcAddress answers by version (a property of the frontend, so not compared with native).
stub=${CUDA_HOME:-/usr/local/cuda}/lib64/stubs/libcuda.so
if VGPU_DRIVER_LOG=0 "$BIN/vgpu-run" --socket "$sock" -- "$PROGS/prog_procaddr" "$stub" >"$OUT/procaddr.vgpu" 2>&1; then
    pass "procaddr: $(tail -1 "$OUT/procaddr.vgpu")"
else
    fail "procaddr"; sed 's/^/    /' "$OUT/procaddr.vgpu"
fi

# Several clients at once, each in its own context on the GPU.
pids=()
for i in 1 2 3 4; do
    "$BIN/vgpu-run" --socket "$sock" -- "$PROGS/prog_copies" 16777216 >"$OUT/concurrent.$i" 2>&1 & pids+=($!)
    "$BIN/vgpu-run" --socket "$sock" -- "$PROGS/prog_streams" "$K/basic.fatbin" >"$OUT/concurrent-s.$i" 2>&1 & pids+=($!)
done
bad=0; for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
if [ $bad -eq 0 ]; then
    pass "8 concurrent clients"
else
    fail "$bad of 8 concurrent clients failed"
    for f in "$OUT"/concurrent.* "$OUT"/concurrent-s.*; do
        grep -qiE "fail|error" "$f" && { echo "    $f:"; tail -n 5 "$f" | sed 's/^/      /'; }
    done
fi

# A client killed mid-stream: everything it held on the GPU comes back.
used() { # on every device
    "$BIN/vgpuctl" --socket "$sock" --json | grep -o '"used_mem":[0-9]*' | cut -d: -f2 | awk '{s += $1} END {print s + 0}'
}
sessions() { "$BIN/vgpuctl" --socket "$sock" --json | sed -n 's/.*"totals":{"sessions":\([0-9]*\).*/\1/p'; }
before=$(used)
"$BIN/vgpu-run" --socket "$sock" -- "$PROGS/prog_hold" "$K/basic.fatbin" >"$OUT/hold.out" 2>&1 &
hold=$!
for _ in $(seq 100); do grep -q ready "$OUT/hold.out" && break; sleep 0.1; done
during=$(used)
sleep 0.3
kill -9 $hold; wait $hold 2>/dev/null
for _ in $(seq 100); do [ "$(sessions)" = 0 ] && break; sleep 0.1; done
after=$(used)
echo "device memory in use: before $before, while the client ran $during, after it was killed $after"
if [ "$(sessions)" = 0 ] && [ "$after" -le $((before + 4 * 1024 * 1024)) ] && [ "$during" -gt "$after" ]; then
    pass "killed client freed"
else
    fail "killed client not freed (sessions $(sessions))"
fi

# Faults: a kernel that writes through a bad pointer, and one that fails a device-side assert, each
# through a vGPU while another client runs kernels. The faulting client sees what it sees natively
# (the same errors, sticky), the other client passes, and so does a client started afterwards; 20
# rounds on the same vgpud. Each fault ends only its tenant's worker's context.
for kind in write assert; do
    "$PROGS/prog_fault" "$K/basic.fatbin" $kind >"$OUT/fault-$kind.native" 2>&1
done
fault_bad=0
for round in $(seq "${VGPU_FAULT_ROUNDS:-20}"); do
    "$BIN/vgpu-run" --socket "$sock" -- "$PROGS/prog_busy" "$K/basic.fatbin" 3 >"$OUT/busy.$round" 2>&1 &
    busy=$!
    sleep 0.5
    for kind in write assert; do
        "$BIN/vgpu-run" --socket "$sock" -- "$PROGS/prog_fault" "$K/basic.fatbin" $kind >"$OUT/fault-$kind.vgpu" 2>&1
        if ! cmp -s <(grep '^fault ' "$OUT/fault-$kind.native") <(grep '^fault ' "$OUT/fault-$kind.vgpu"); then
            fault_bad=$((fault_bad + 1))
            echo "round $round, $kind: native: $(grep '^fault ' "$OUT/fault-$kind.native")"
            echo "round $round, $kind: vGPU:   $(grep '^fault ' "$OUT/fault-$kind.vgpu" || tail -3 "$OUT/fault-$kind.vgpu")"
        fi
    done
    wait $busy || { fault_bad=$((fault_bad + 1)); echo "round $round: the other client failed"; tail -3 "$OUT/busy.$round"; }
    "$BIN/vgpu-run" --socket "$sock" -- "$PROGS/prog_vecadd" "$K/basic.fatbin" >"$OUT/after-fault.$round" 2>&1 ||
        { fault_bad=$((fault_bad + 1)); echo "round $round: a client afterwards failed"; tail -3 "$OUT/after-fault.$round"; }
done
echo "faults natively: $(grep -h '^fault ' "$OUT"/fault-*.native | tr '\n' ';')"
[ $fault_bad -eq 0 ] && pass "faulting kernels (bad pointer, assert): native errors, bystanders unharmed, ${VGPU_FAULT_ROUNDS:-20} rounds" ||
    fail "faulting kernels: $fault_bad problem(s)"

# PyTorch's other allocators: on the VMM API (expandable segments), and on stream-ordered pools.
if "${VGPU_PYTHON:-python3}" -c "import torch" >/dev/null 2>&1; then
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
        compare pytorch-expandable "${VGPU_PYTHON:-python3}" "$(dirname "$0")/allocator_probe.py"
    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync \
        compare pytorch-malloc-async "${VGPU_PYTHON:-python3}" "$(dirname "$0")/allocator_probe.py"
fi

# Frameworks (PyTorch, CuPy, JAX): every step that passes natively must pass through a vGPU.
for fw in pytorch:torch cupy:cupy jax:jax; do
    name=${fw%%:*}; module=${fw#*:}
    "$PYTHON" -c "import $module" >/dev/null 2>&1 || { echo "$name: not installed here"; continue; }
    probe=$(dirname "$0")/${name}_probe.py
    timeout 400 "$PYTHON" "$probe" >"$OUT/$name.native" 2>"$OUT/$name.native.err"
    VGPU_LOG_LEVEL=debug timeout 400 "$BIN/vgpu-run" --socket "$sock" -- "$PYTHON" "$probe" >"$OUT/$name.vgpu" 2>"$OUT/$name.vgpu.err"
    echo "$name, native:"; sed 's/^/    /' "$OUT/$name.native"
    echo "$name, through a vGPU (log: $OUT/$name.vgpu.err):"; sed 's/^/    /' "$OUT/$name.vgpu"
    lost=$(grep '^STEP .*: ok' "$OUT/$name.native" | sed 's/: ok.*//' | while read -r s; do
        grep -qF "$s: ok" "$OUT/$name.vgpu" || echo "$s"; done)
    [ -z "$lost" ] && pass "$name: every step that passes natively passes through a vGPU" ||
        fail "$name: natively but not through a vGPU: $(echo "$lost" | sed 's/^STEP //' | tr '\n' ';')"
done
"$BIN/vgpuctl" --socket "$sock" ping >/dev/null && pass "vgpud still serving" || fail "vgpud gone"

# Memory quotas: a vgpud whose vGPUs have 4 GiB each. The tenant sees 4 GiB as the device's memory
# and gets OUT_OF_MEMORY at it, in a driver-API program and in PyTorch.
stop_vgpud
start_vgpud "$BIN" "$sock" "$OUT/vgpud-quota.log" cuda info --default-memory 4G || exit 1
quota_run() { # name, program and arguments
    local name=$1; shift
    if "$BIN/vgpu-run" --socket "$sock" -- "$@" >"$OUT/$name.vgpu" 2>&1; then pass "$name: $(tail -1 "$OUT/$name.vgpu")"
    else fail "$name: failed"; sed 's/^/    /' "$OUT/$name.vgpu"; fi
}
quota_run quota "$PROGS/prog_quota" 4096
"$PYTHON" -c "import torch" >/dev/null 2>&1 && quota_run quota-pytorch "$PYTHON" "$(dirname "$0")/quota_probe.py" 4096
# PyTorch's allocators on the VMM API (expandable segments) under the quota.
"$PYTHON" -c "import torch" >/dev/null 2>&1 && PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
    quota_run quota-pytorch-expandable "$PYTHON" "$(dirname "$0")/quota_probe.py" 4096
"$PYTHON" -c "import torch" >/dev/null 2>&1 && PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync \
    quota_run quota-pytorch-malloc-async "$PYTHON" "$(dirname "$0")/quota_probe.py" 4096

# Swapping: a vgpud whose vGPUs may hold 2 GiB of the GPU in all, with host swap. Three tenants of
# 1000 MiB each (a driver-API program), then three PyTorch processes of 960 MiB each, run at once:
# they take turns on the device and all finish with their data intact.
stop_vgpud
start_vgpud "$BIN" "$sock" "$OUT/vgpud-swap.log" cuda info --swap-host 8G --swap-capacity 2G --swap-reserve 0 || exit 1
swap_run() { # name, count, program and arguments
    local name=$1 count=$2; shift 2
    local pids=() ok=1
    for i in $(seq "$count"); do
        "$BIN/vgpu-run" --socket "$sock" -- "$@" >"$OUT/$name.$i.vgpu" 2>&1 &
        pids+=($!)
    done
    for i in $(seq "$count"); do wait "${pids[$((i - 1))]}" || ok=0; done
    if [ $ok = 1 ]; then pass "$name: $count at once: $(tail -1 "$OUT/$name.1.vgpu")"
    else fail "$name: failed"; for i in $(seq "$count"); do sed 's/^/    /' "$OUT/$name.$i.vgpu"; done; fi
}
swap_run swap 3 "$PROGS/prog_swap" "$K/basic.fatbin" 1000:4
"$PYTHON" -c "import torch" >/dev/null 2>&1 && swap_run swap-pytorch 3 "$PYTHON" "$(dirname "$0")/swap_probe.py" 960 4
"$BIN/vgpuctl" --socket "$sock" status >"$OUT/swap-status.txt" 2>&1

stop_vgpud
