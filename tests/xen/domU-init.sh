#!/bin/sh
# /init of the guest in the Xen smoke test: CUDA driver-API programs through the vGPU dom0 offers,
# a hostile program, the round trip, then a process that holds resources until dom0 destroys the
# domain. Results go to dom0 through xenstore (data/...), details to the console.
export PATH=/opt/vgpu/bin:/sbin:/bin:/usr/sbin:/usr/bin
export LD_LIBRARY_PATH=/opt/vgpu/lib
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
say() { echo "GUEST: $*"; }
verdict() { xenstore-write data/detail "$2"; xenstore-write data/result "$1"; }
fail() { say "FAIL: $*"; verdict FAIL "$*"; sleep 3600; }
# Granted pages: xen-gntalloc allows 1,024 by default; a channel takes about 3,150 (README: Xen).
for m in xen-privcmd xenfs xen-evtchn xen-gntdev "xen-gntalloc limit=65536"; do
    set -- $m
    insmod /lib/modules/$(uname -r)/$1.ko $2 || fail "insmod $1"
done
mount -t xenfs xenfs /proc/xen
say "domain $(xenstore-read domid) up at $(cut -d' ' -f1 /proc/uptime) s"
# vgpu_test=hold on the kernel's command line: only hold resources (dom0 detaches the vGPUs);
# vgpu_test=remote: an assembly of a vGPU of dom0's node and one of another node's (below).
hold_only=false
grep -q "vgpu_test=hold" /proc/cmdline && hold_only=true
remote_only=false
grep -q "vgpu_test=remote" /proc/cmdline && remote_only=true
uptime_s() { cut -d' ' -f1 /proc/uptime; }
# Each program has 150 s: one that hangs fails the test naming itself, before dom0's window (330 s) closes.
run() { # name program args...
    name=$1; shift
    t0=$(uptime_s)
    if timeout 150 "$@" >/tmp/$name.out 2>&1; then
        say "$name ($(echo "$(uptime_s) $t0" | awk '{printf "%.1f", $1 - $2}') s): $(tail -1 /tmp/$name.out)"
    else # the verdict first: the console may take a while to carry the output
        rc=$?
        verdict FAIL "$name (exit $rc$([ $rc = 143 ] && echo ": killed after 150 s")): $(tail -2 /tmp/$name.out | tr '\n' ' ')"
        say "FAIL: $name"
        cat /tmp/$name.out
        sleep 3600
    fi
}
# hold_quota NAME MiB [env...]: a process that holds MiB of a vGPU's quota until hold_quota_end.
# It writes them: under emulation each MiB first written costs dom0 about 0.2 s (a PV domain's page
# faults), so the holders hold little.
hold_quota() {
    name=$1; mib=$2; shift 2
    env "$@" prog_quota hold $mib >/tmp/$name.out 2>&1 &
    qhold=$!
    i=0
    while ! grep -q holding /tmp/$name.out; do
        i=$((i + 1)); { [ $i -gt 300 ] || ! kill -0 $qhold 2>/dev/null; } && fail "prog_quota hold: $(cat /tmp/$name.out)"
        sleep 0.1
    done
}
hold_quota_end() { kill -TERM $qhold; wait $qhold || fail "prog_quota hold: $(tail -2 /tmp/$1.out)"; }
if $remote_only; then
    # Device 1 is node peer's: copies into and out of it, and between the two devices (2 MiB at
    # most, two of the guest's staging slots: under emulation the program takes 70-100 s with
    # 20 MiB, 40-60 s with 4 MiB; check_cluster and check_host run it whole).
    run remote-peer env PROG_PEER_LARGEST=$((2 << 20)) prog_peer
    # Its quota (memory=256M) is the guest's there too, whatever processes use it.
    hold_quota remote-hold 8 CUDA_VISIBLE_DEVICES=1
    run remote-quota-shared env CUDA_VISIBLE_DEVICES=1 prog_quota 256 8
    hold_quota_end remote-hold
    prog_hold >/tmp/hold.out 2>&1 & # a session for dom0's vgpuctl show
    while ! grep -q ready /tmp/hold.out; do sleep 0.1; done
    verdict PASS "the assembly's two vGPUs, one of them another node's"
    say "PASS"
    sleep 3600
fi
if ! $hold_only; then
# Two pinned 8 MiB buffers at once: more than the default data area (12 MiB) holds, so one spills.
run copies prog_copies 8388608
run streams prog_streams /opt/vgpu/basic.emu.so
run kernel prog_vecadd /opt/vgpu/basic.emu.so
# Pinned and registered memory that kernels reach at the program's own pointers, as unified
# addressing has it: the worker maps the granted pages at the guest's addresses of them too.
run host-pointer prog_host_pointer /opt/vgpu/basic.emu.so
for what in cuMemHostAlloc cuMemHostRegister; do
    grep -q "^$what: its device pointer is its host pointer: yes, and its attribute gives that device pointer: yes" \
        /tmp/host-pointer.out || fail "$what memory in the guest: $(grep "^$what" /tmp/host-pointer.out)"
done
# Kernels' printf reaches the guest's program before the synchronising call returns, in its place.
run printf prog_printf /opt/vgpu/basic.emu.so
[ "$(grep -A4 '^before the kernels' /tmp/printf.out | tr '\n' '|')" = "before the kernels|kernel says 1, line 0|kernel says 2, line 0|kernel says 3, line 0|after cuCtxSynchronize|" ] ||
    fail "kernels' printf in the guest: $(head -6 /tmp/printf.out | tr '\n' '|')"
# NVML in the guest: its vGPU as CUDA sees it, the memory and processes of this guest's tenants.
run nvml prog_nvml
# The quota of the guest's xl configuration (memory=512M) is its device's memory.
run quota prog_quota 512
# The guest's processes hold that quota together: while one holds 8 MiB, another has 504; a third
# whose worker dies holding 128 MiB gives them back with its worker.
hold_quota quota-hold 8
run quota-shared prog_quota 512 8
run quota-fault prog_fault /opt/vgpu/basic.emu.so write 128
grep -q "synchronize CUDA_ERROR_ILLEGAL_ADDRESS" /tmp/quota-fault.out || fail "the faulting holder saw: $(cat /tmp/quota-fault.out)"
run quota-after-fault prog_quota 512 8
hold_quota_end quota-hold
run quota-whole prog_quota 512
# Gdev's segments across guests of one shm group: the second guest made one under this key.
run shm-across prog_shm find 0x5eed
run hostile xen_hostile
run after-hostile prog_copies 4096
# A program whose kernel writes through a bad pointer: its worker in dom0 dies of it, the program
# gets what a GPU gives (CUDA_ERROR_ILLEGAL_ADDRESS, from then on), and the guest's other program,
# busy meanwhile, goes on.
prog_busy /opt/vgpu/basic.emu.so 6 >/tmp/busy.out 2>&1 &
busy=$!
sleep 1
run fault prog_fault /opt/vgpu/basic.emu.so write
grep -q "synchronize CUDA_ERROR_ILLEGAL_ADDRESS, then alloc CUDA_ERROR_ILLEGAL_ADDRESS" /tmp/fault.out ||
    fail "the faulting program saw: $(cat /tmp/fault.out)"
wait $busy || fail "the guest's other program failed when a worker crashed: $(tail -2 /tmp/busy.out)"
say "busy: $(tail -1 /tmp/busy.out)"
run after-fault prog_vecadd /opt/vgpu/basic.emu.so
# With the driver's default grant limit (1,024 pages), channels shrink to fit half of it (2 MiB,
# ring and data area together: copies of 2 MiB do not fit its data area).
echo 1024 >/sys/module/xen_gntalloc/parameters/limit || fail "cannot set gntalloc's limit"
VGPU_LOG_LEVEL=info run small-grant-limit prog_copies 2097152
grep -q "gntalloc lets this guest grant 1024 pages" /tmp/small-grant-limit.out ||
    fail "the channel did not shrink to gntalloc's limit"
echo 65536 >/sys/module/xen_gntalloc/parameters/limit
if [ -e /opt/vgpu/lib-san/libcuda.so.1 ]; then # make check: the frontend with ASan and UBSan
    san="env LD_LIBRARY_PATH=/opt/vgpu/lib-san LD_PRELOAD=$(cat /opt/vgpu/lib-san/preload)"
    run san-copies $san prog_copies 1048576
    run san-streams $san prog_streams /opt/vgpu/basic.emu.so
    grep -q "Sanitizer\|runtime error" /tmp/san-*.out && fail "sanitizer report in the guest: $(cat /tmp/san-*.out)"
fi
run latency bench_latency 200
grep RESULT /tmp/latency.out | sed 's/^/GUEST-RTT /'
# xen_hostile left a session directory that nobody serves: vgpud removes it after 10 s.
i=0
while xenstore-exists device/vgpu/0/sessions/stale; do
    i=$((i + 1)); [ $i -gt 300 ] && fail "vgpud never removed an unserved session directory"
    sleep 0.1
done
say "unserved session directory removed by vgpud"
verdict PASS "all programs passed"
fi
# The second guest makes a segment for the first one to find (both configurations name one shm group).
if $hold_only; then
    prog_shm make 0x5eed >/tmp/shm.out 2>&1 &
    i=0
    while ! grep -q ready /tmp/shm.out; do
        i=$((i + 1))
        if [ $i -gt 300 ] || ! grep -q . /proc/$!/stat 2>/dev/null; then
            say "prog_shm make never got ready: $(cat /tmp/shm.out)"
            xenstore-write data/holding "prog_shm make never got ready: $(tail -1 /tmp/shm.out)"
            sleep 3600
        fi
        sleep 0.1
    done
    say "a segment made under key 0x5eed for the other guest"
fi
# Something for dom0 to take away: a process that holds vGPU memory until the domain is destroyed,
# its pinned buffer in a data area larger than the default. It copies, resting 200 ms after each
# round: the second guest's copy is busy all through the other guest's programs, and under
# emulation a bystander that never rests halved their share of dom0's CPUs and the copy engine.
VGPU_DATA_AREA=40M prog_hold /opt/vgpu/basic.emu.so 200 >/tmp/hold.out 2>&1 &
hold=$!
i=0
while ! grep -q ready /tmp/hold.out; do
    i=$((i + 1))
    if [ $i -gt 200 ] || ! kill -0 $hold 2>/dev/null; then
        say "prog_hold never got ready: $(cat /tmp/hold.out)"
        xenstore-write data/holding "prog_hold never got ready: $(tail -1 /tmp/hold.out)"
        sleep 3600
    fi
    sleep 0.1
done
xenstore-write data/holding 1
say "holding vGPU resources; waiting to be destroyed"
sleep 3600
