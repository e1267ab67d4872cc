# Two vgpuds on this host, nodes a and b linked over UCX (UCX_TLS picks the transports), for the
# benchmarks that reach b's vGPU from a (remote.sh, timeline.sh); sourced. The caller sets
# VGPU_BIN, PAIR_DIR (their sockets a.sock and b.sock, and the cluster key), PAIR_LOGS (their logs:
# PAIR_LOGS-a.log, PAIR_LOGS-b.log), PAIR_EXECUTOR, PAIR_LEVEL (their log level) and PAIR_GPUS
# (with two or more, b serves the second GPU).
pair_port=$((20000 + $$ % 20000))
pair_pids=()
head -c 32 /dev/urandom >"$PAIR_DIR/cluster.key"
pair_stop() { for p in "${pair_pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; pair_pids=(); }
pair_start() { # more vgpud options for both
    pair_stop
    local n
    for n in a b; do
        local other=$([ $n = a ] && echo b || echo a) mine=$pair_port theirs=$((pair_port + 1)) visible=0
        [ $n = b ] && mine=$((pair_port + 1)) theirs=$pair_port
        [ "${PAIR_GPUS:-1}" -ge 2 ] && [ $n = b ] && visible=1
        CUDA_VISIBLE_DEVICES=$visible "$VGPU_BIN/vgpud" --foreground --executor "$PAIR_EXECUTOR" \
            --log-level "$PAIR_LEVEL" --socket "$PAIR_DIR/$n.sock" --node $n --remote-listen 127.0.0.1:$mine \
            --peer $other=127.0.0.1:$theirs --cluster-key "$PAIR_DIR/cluster.key" "$@" >"$PAIR_LOGS-$n.log" 2>&1 &
        pair_pids+=($!)
    done
    for _ in $(seq 200); do
        "$VGPU_BIN/vgpuctl" --socket "$PAIR_DIR/a.sock" --json cluster 2>/dev/null | grep -q '"state":"up"' && return 0
        sleep 0.1
    done
    echo "the vgpuds did not link:" >&2; cat "$PAIR_LOGS"-*.log >&2; return 1
}
trap pair_stop EXIT
