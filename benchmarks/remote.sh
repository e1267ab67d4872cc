#!/bin/bash
# Remote vGPUs side by side with native and local ones, in one run: two vgpuds on this host, nodes
# a and b linked over UCX (TCP on loopback here; verbs where the fabric has them), and each
# benchmark run natively, on a local vGPU of a, on b's vGPU reached from a (batched, vgpud's
# default), and on b's vGPU with each call sent alone (--remote-batch 1,0,0). With two GPUs, a
# serves the first and b the second. Prints every figure and its ratio to native. Needs a GPU.
#   VGPU_BIN, BENCH_BIN, BENCH_MODULE, BENCH_OUT as for run.sh; REMOTE_PARTS (default "latency launch copy
#   batches neighbour"; neighbour: the latency part on b's vGPU while another tenant copies through
#   the same link); REMOTE_TRANSPORTS (NAME=UCX_TLS ..., default tcp and shared memory); REMOTE_BATCHES;
#   REMOTE_COPY_MAX (largest copy, default 64 MiB); REMOTE_COPY_MIN (smallest, default 4 KiB);
#   REMOTE_UNBATCHED (0: no run with each call sent alone);
#   LINK_RAW (the raw link's program, default BENCH_BIN/link_raw); RAW_COLD_MIB (its cold copies' buffer, default 1024)
#   REMOTE_BATCH  the batched configuration's --remote-batch (default vgpud's)
#   REMOTE_OPTS   more vgpud options for every pair (e.g. --remote-spin-us 0)
#   REMOTE_EXECUTOR cuda (default), or emu to try the script where there is no GPU
set -eu
VGPU_BIN=${VGPU_BIN:-build/bin}
BENCH_BIN=${BENCH_BIN:-build/benchmarks}
BENCH_MODULE=${BENCH_MODULE:-build/tests/kernels/basic.fatbin}
BENCH_OUT=${BENCH_OUT:-build/benchmarks/results}/remote
REMOTE_PARTS=" ${REMOTE_PARTS:-latency launch copy batches neighbour} "
mkdir -p "$BENCH_OUT"
rm -f "$BENCH_OUT"/*.res
EXECUTOR=${REMOTE_EXECUTOR:-cuda}
gpus=$([ "$EXECUTOR" = cuda ] && nvidia-smi -L | wc -l || echo 1)
PAIR_DIR=$BENCH_OUT PAIR_LOGS=$BENCH_OUT/vgpud PAIR_EXECUTOR=$EXECUTOR PAIR_LEVEL=warn PAIR_GPUS=$gpus
. "$(dirname "$0")/vgpud_pair.sh"
start_pair() { pair_start ${REMOTE_OPTS:-} "$@"; } # more vgpud options for both
part() { case $REMOTE_PARTS in *" $1 "*) return 0 ;; esac; return 1; }
run_all() { # config name, vgpu-run arguments (none: native)
    local cfg=$1; shift
    part latency && "$@" "$BENCH_BIN/bench_latency" 20000 >>"$BENCH_OUT/$cfg.res"
    part launch && "$@" "$BENCH_BIN/bench_launch" "$BENCH_MODULE" 200000 >>"$BENCH_OUT/$cfg.res"
    part copy && "$@" "$BENCH_BIN/bench_copy" "${REMOTE_COPY_MAX:-$((64 << 20))}" "${REMOTE_COPY_MIN:-4096}" >>"$BENCH_OUT/$cfg.res"
    return 0
}
LINK_RAW=${LINK_RAW:-$BENCH_BIN/link_raw}
# Each transport in turn (UCX_TLS, for the vgpuds and the raw link alike): TCP on loopback, and
# shared memory between the two processes (UCX still connects them over TCP, then moves everything
# through its shared-memory transports).
TRANSPORTS=${REMOTE_TRANSPORTS:-"tcp=tcp shm=posix,sysv,self,tcp"}
# Batch limits (--remote-batch N,256K,20) for the table of batch size against launch rate.
BATCHES=${REMOTE_BATCHES:-"1 2 4 8 16 32 64 128"}
if [ "$EXECUTOR" = cuda ]; then run_all native env; fi
for t in $TRANSPORTS; do
    name=${t%%=*}
    export UCX_TLS=${t#*=}
    if [ -x "$LINK_RAW" ]; then
        "$LINK_RAW" 20000 $((64 << 20)) >"$BENCH_OUT/raw-$name.res"
        # Again with bytes out of the caches, as a copy's are (RAW_COLD_MIB: the buffer they rotate through)
        LINK_RAW_COLD_MIB=${RAW_COLD_MIB:-1024} "$LINK_RAW" 20000 $((64 << 20)) >>"$BENCH_OUT/raw-$name.res"
    fi
    start_pair ${REMOTE_BATCH:+--remote-batch "$REMOTE_BATCH"}
    [ "$name" = "${TRANSPORTS%%=*}" ] && run_all local "$VGPU_BIN/vgpu-run" --socket "$BENCH_OUT/a.sock" --vgpu device=0 --
    run_all "remote-$name" "$VGPU_BIN/vgpu-run" --socket "$BENCH_OUT/a.sock" --vgpu node=b,device=0 --
    if [ "${REMOTE_UNBATCHED:-1}" != 0 ]; then
        start_pair --remote-batch 1,0,0
        run_all "remote-unbatched-$name" "$VGPU_BIN/vgpu-run" --socket "$BENCH_OUT/a.sock" --vgpu node=b,device=0 --
    fi
    if part neighbour; then
        # Another tenant of a copies 4 MiB to and from b's vGPU without pause (the same vgpuds, the
        # same link) while the round trip is measured: what one tenant's bulk bytes cost another's calls.
        remote=("$VGPU_BIN/vgpu-run" --socket "$BENCH_OUT/a.sock" --vgpu node=b,device=0 --)
        (while "${remote[@]}" "$BENCH_BIN/bench_copy" 4194304 4194304 >/dev/null 2>&1; do :; done) &
        neighbour=$!
        sleep 1
        "${remote[@]}" "$BENCH_BIN/bench_latency" 20000 | sed 's/^RESULT /RESULT neighbour_/' >>"$BENCH_OUT/remote-$name.res"
        pkill -P $neighbour 2>/dev/null || true
        kill $neighbour 2>/dev/null || true
        wait $neighbour 2>/dev/null || true
    fi
    if part batches; then
        for lim in $BATCHES; do
            start_pair --remote-batch "$lim,256K,20"
            echo "BATCH $lim $("$VGPU_BIN/vgpu-run" --socket "$BENCH_OUT/a.sock" --vgpu node=b,device=0 -- \
                "$BENCH_BIN/bench_launch" "$BENCH_MODULE" 200000 | awk '$1 == "RESULT" && $2 == "launch_rate" {print $3}')" \
                >>"$BENCH_OUT/batches-$name.res"
        done
    fi
    unset UCX_TLS
done
pair_stop
echo "device: $([ "$EXECUTOR" = cuda ] && nvidia-smi --query-gpu=name --format=csv,noheader | head -1 || echo emu) x $gpus; links: UCX on one host, by transport: $TRANSPORTS"
python3 - "$BENCH_OUT" "$TRANSPORTS" <<'PY'
import sys, os
d, transports = sys.argv[1], [t.split("=")[0] for t in sys.argv[2].split()]
def read(name):
    r = {}
    path = os.path.join(d, name + ".res")
    if os.path.exists(path):
        for line in open(path):
            p = line.split()
            if len(p) >= 4 and p[0] == "RESULT":
                r[p[1]] = (float(p[2]), p[3])
    return r
native, local = read("native"), read("local")
base, bname = (native, "native") if native else (local, "local")  # emu: no native run
for t in transports:
    remote, unbatched, raw = read("remote-" + t), read("remote-unbatched-" + t), read("raw-" + t)
    print("\n== transport %s" % t)
    print("%-28s %12s %12s %12s %12s   ratios to %s (local remote unbatched)" % ("figure", "native", "local", "remote", "unbatched", bname))
    for k in base:
        v, unit = base[k]
        row = [c.get(k, (float("nan"), unit))[0] for c in (native, local, remote, unbatched)]
        ratios = " ".join("%.3f" % (x / v) if v else "-" for x in row[1:])
        print("%-28s %12.3f %12.3f %12.3f %12.3f   %s (%s)" % (k, *row, ratios, unit))
    for k in ("ctx_synchronize", "read_4_bytes"):
        if "neighbour_%s_median" % k in remote and k + "_median" in remote:
            print("remote %s: median %.2f us, p99 %.2f us; with another tenant copying 4 MiB on the link: %.2f, %.2f" %
                  (k, remote[k + "_median"][0], remote[k + "_p99"][0], remote["neighbour_%s_median" % k][0],
                   remote["neighbour_%s_p99" % k][0]))
    if raw:
        print("raw link: round trip %.2f us polling, %.2f us sleeping on UCX's descriptor (medians)" %
              (raw["raw_rtt_poll_median"][0], raw["raw_rtt_sleep_median"][0]))
        held = ["%s %.0f us" % (k[len("raw_copy_"):-len("_longest_call")].replace("_", " "), raw[k][0])
                for k in sorted(raw, key=lambda k: raw[k][0]) if k.endswith("_longest_call")]
        if held:
            print("raw link: the sender's longest progress call in one transfer (medians): " + ", ".join(held))
        for k in ("ctx_synchronize_median", "read_4_bytes_median"):
            if k in remote:
                print("  remote %-22s %8.2f us: %+8.2f us over the raw round trip (sleeping), %+8.2f (polling)" %
                      (k, remote[k][0], remote[k][0] - raw["raw_rtt_sleep_median"][0], remote[k][0] - raw["raw_rtt_poll_median"][0]))
        for size, mib in ((67108864, 64), (16777216, 16), (4194304, 4), (1048576, 1)):
            rk = "raw_copy_%dMiB" % mib
            if rk not in raw:
                continue
            for k in ("htod_pageable_%d" % size, "dtoh_pageable_%d" % size, "htod_pinned_%d" % size, "dtoh_pinned_%d" % size):
                # A device-to-host copy's bytes come back: against the raw link's copies that way.
                rkk = "raw_copy_back_%dMiB" % mib if k.startswith("dtoh") and "raw_copy_back_%dMiB" % mib in raw else rk
                cold = rkk.replace("_%dMiB" % mib, "_cold_%dMiB" % mib)
                cold_text = ("; %.2f of its %.2f GB/s with cold bytes" % (remote[k][0] / raw[cold][0], raw[cold][0])
                             if cold in raw and k in remote else "")
                if k in remote:
                    print("  remote %-22s %8.2f GB/s: %.2f of the raw link's %.2f GB/s%s%s" %
                          (k, remote[k][0], remote[k][0] / raw[rkk][0], raw[rkk][0], " (back)" if rkk != rk else "",
                           cold_text))
    bpath = os.path.join(d, "batches-%s.res" % t)
    if os.path.exists(bpath):
        lr = local.get("launch_rate", (0, ""))[0]
        print("  batch limit -> empty-kernel launches/s on the remote vGPU (ratio to the local vGPU)")
        for line in open(bpath):
            p = line.split()
            if len(p) == 3 and p[2]:
                print("  %6s %12.0f %8s" % (p[1], float(p[2]), "%.3f" % (float(p[2]) / lr) if lr else "-"))
PY
