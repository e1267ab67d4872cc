# Sourced by run.sh.
# Remote vGPUs: a second vgpud, node b, linked to node a over UCX on loopback, over TCP and over
# shared memory (VGPU_REMOTE_TRANSPORTS: NAME=UCX_TLS ...); with two GPUs each owns one (a the
# first, b the second), else both share this one. Programs on b's vGPU, reached through a, must
# print what they print natively on b's GPU (the application suite too); over the first transport
# also peer copies between a local and a remote vGPU, the frameworks' probes, and PyTorch on an
# assembly of a local and a remote vGPU.
a_gpu="" b_gpu=""
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then a_gpu=0 b_gpu=1; fi
on_gpu() { # GPU (empty: all), command: the command sees that GPU only
    local gpu=$1; shift
    if [ -n "$gpu" ]; then CUDA_VISIBLE_DEVICES=$gpu "$@"; else "$@"; fi
}
key=$OUT/cluster.key
head -c 32 /dev/urandom >"$key"
bsock=$(mktemp -u /tmp/vgpud-gpu-b.XXXXXX)
remote_compare() { # name, program and arguments: natively, then on b's vGPU through a
    local name=$1; shift
    on_gpu "$b_gpu" "$@" >"$OUT/$name.native" 2>&1; local rn=$?
    "$BIN/vgpu-run" --socket "$sock" --vgpu node=b,device=0 -- "$@" >"$OUT/$name.vgpu" 2>&1; local rv=$?
    if [ $rn -ne 0 ] || [ $rv -ne 0 ]; then fail "$name: native $rn, remote vGPU $rv"; sed 's/^/    /' "$OUT/$name.vgpu"
    elif ! same_output "$OUT/$name.native" "$OUT/$name.vgpu" "${by_design:-}"; then fail "$name: outputs differ"
        show_difference "$OUT/$name.native" "$OUT/$name.vgpu" "${by_design:-}"
    else pass "$name: $(tail -1 "$OUT/$name.vgpu")$by_design_note"; fi
}
remote_links() { # transport name, UCX_TLS, whether to run everything
    local t=$1 full=$3 port=$((20000 + ($$ + RANDOM) % 20000))
    export UCX_TLS=$2
    on_gpu "$b_gpu" "$BIN/vgpud" --foreground --executor cuda --log-level info \
        --socket "$bsock" --node b --remote-listen 127.0.0.1:$((port + 1)) \
        --peer a=127.0.0.1:$port --cluster-key "$key" >"$OUT/vgpud-b-$t.log" 2>&1 &
    local bpid=$!
    on_gpu "$a_gpu" start_vgpud "$BIN" "$sock" "$OUT/vgpud-a-$t.log" cuda info --node a \
        --remote-listen 127.0.0.1:$port --peer b=127.0.0.1:$((port + 1)) --cluster-key "$key" || exit 1
    for _ in $(seq 100); do "$BIN/vgpuctl" --socket "$sock" --json cluster 2>/dev/null | grep -q '"state":"up"' && break; sleep 0.1; done
    remote_compare "remote-$t-copies" "$PROGS/prog_copies"
    remote_compare "remote-$t-vecadd" "$PROGS/prog_vecadd" "$K/basic.fatbin"
    remote_compare "remote-$t-streams" "$PROGS/prog_streams" "$K/basic.fatbin"
    remote_compare "remote-$t-copy3d" "$PROGS/prog_copy3d"
    remote_compare "remote-$t-params" "$PROGS/prog_params" "$K/basic.fatbin"
    # zero_copy's kernels use the tenant's host memory in place, which a GPU of another node never
    # reaches: a remote vGPU says it cannot map host memory (CAN_MAP_HOST_MEMORY 0), and the program stops.
    for app in $APP_NAMES; do
        [ "$app" = zero_copy ] || by_design=$BY_DESIGN_DIR/$app.remote remote_compare "remote-$t-app-$app" "$APPS/$app.static"
    done
    if [ "$full" = 1 ]; then
        if "$BIN/vgpu-run" --socket "$sock" --vgpu device=0 --vgpu node=b,device=0 -- "$PROGS/prog_peer" >"$OUT/remote-$t-peer.vgpu" 2>&1
        then pass "remote-$t-peer: $(tail -1 "$OUT/remote-$t-peer.vgpu")"; else fail "remote-$t-peer"; sed 's/^/    /' "$OUT/remote-$t-peer.vgpu"; fi
        # The frameworks' probes on b's vGPU: every step that passed natively above.
        for fw in pytorch:torch cupy:cupy jax:jax; do
            name=${fw%%:*}; module=${fw#*:}
            "$PYTHON" -c "import $module" >/dev/null 2>&1 || continue
            # Natively on b's GPU where the local part did not run (VGPU_GPU_PARTS=remote).
            [ -f "$OUT/$name.native" ] || on_gpu "$b_gpu" timeout 400 "$PYTHON" "$(dirname "$0")/${name}_probe.py" \
                >"$OUT/$name.native" 2>"$OUT/$name.native.err"
            timeout 300 "$BIN/vgpu-run" --socket "$sock" --vgpu node=b,device=0 -- "$PYTHON" "$(dirname "$0")/${name}_probe.py" \
                >"$OUT/remote-$t-$name.vgpu" 2>"$OUT/remote-$t-$name.vgpu.err"
            lost=$(grep '^STEP .*: ok' "$OUT/$name.native" | sed 's/: ok.*//' | while read -r s; do
                grep -qF "$s: ok" "$OUT/remote-$t-$name.vgpu" || echo "$s"; done)
            [ -z "$lost" ] && pass "remote-$t-$name: every step that passes natively passes on a remote vGPU" ||
                fail "remote-$t-$name: natively but not on a remote vGPU: $(echo "$lost" | sed 's/^STEP //' | tr '\n' ';')"
        done
        if "$PYTHON" -c "import torch" >/dev/null 2>&1; then
            if timeout 300 "$BIN/vgpu-run" --socket "$sock" --vgpu device=0 --vgpu node=b,device=0 -- \
                "$PYTHON" "$(dirname "$0")/pytorch_assembly.py" >"$OUT/remote-$t-assembly.vgpu" 2>&1; then
                pass "remote-$t-assembly: $(tail -1 "$OUT/remote-$t-assembly.vgpu")"
            else
                fail "remote-$t-assembly"; tail -20 "$OUT/remote-$t-assembly.vgpu" | sed 's/^/    /'
            fi
        fi
    fi
    kill $bpid; wait $bpid 2>/dev/null
    stop_vgpud
    unset UCX_TLS
}
full=1
for transport in ${VGPU_REMOTE_TRANSPORTS:-tcp=tcp shm=posix,sysv,self,tcp}; do
    remote_links "${transport%%=*}" "${transport#*=}" $full
    full=0
done

