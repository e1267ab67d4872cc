#!/bin/sh
# /init of dom0 in the Xen smoke test: the Xen toolstack, vgpud (emu executor), a second guest that
# holds vGPU resources while a guest from configs/vgpu-guest.cfg runs CUDA programs through its vGPU
# (one of which crashes its worker), then `xl destroy` of that guest while it holds vGPU resources
# and a check that vgpud has freed them and left the second guest alone, then the second guest's
# vGPUs detached by the toolstack. Every stage has a deadline and says what it waited for; the
# verdict is `XEN-SMOKE: PASS` or `XEN-SMOKE: FAIL (...)`.
export PATH=/opt/vgpu/bin:/usr/lib/xen-4.17/bin:/sbin:/bin:/usr/sbin:/usr/bin
# A sanitizer build (make check) keeps freed memory aside to catch late uses, 256 MiB by default: two
# vgpuds carrying a remote vGPU's copies would fill this small dom0 with it.
export ASAN_OPTIONS=quarantine_size_mb=16
up() { cut -d' ' -f1 /proc/uptime; }
stage() { echo "XEN-STAGE $(up) $*"; }
finish() {
    echo "--- vgpud log ---"; grep -v "cuGetProcAddress" /var/log/vgpud.log 2>/dev/null | tail -60
    echo "--- vgpuctl ---"; vgpuctl list 2>&1 | head -20; vgpuctl --json 2>&1 | head -c 1500; echo
    echo "--- links ---"; grep -h "remote:" /var/log/vgpud.log /var/log/vgpud-peer.log 2>/dev/null | tail -20
    echo "--- xenstore ---"; xenstore-ls -f /local/domain/0/backend 2>/dev/null | head -20; ls /var/lib/xen
    echo "XEN-SMOKE: $*"
    sync; poweroff -f; sleep 60
}
fail() { sleep 3; finish "FAIL ($*)"; } # the pause: the guest's console drains
# wait_for SECONDS WHAT COMMAND...: retry COMMAND every 0.2 s for SECONDS of the clock (under
# emulation a try may take longer than the pause), so that this script fails, with vgpud's log,
# before run.py's deadline for the stage.
wait_for() {
    t=$1; what=$2; shift 2; until=$(($(cut -d. -f1 /proc/uptime) + t))
    while ! "$@" >/dev/null 2>&1; do
        [ "$(cut -d. -f1 /proc/uptime)" -ge $until ] && fail "waited ${t} s for $what"
        sleep 0.2
    done
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm && mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /run
mkdir -p /run/xen /run/xenstored /run/lock
stage "dom0 userspace"
for m in xen-privcmd xenfs xen-evtchn xen-gntdev xen-gntalloc; do
    insmod /lib/modules/$(uname -r)/$m.ko || fail "insmod $m"
done
mount -t xenfs xenfs /proc/xen || fail "mount xenfs"
grep -q control_d /proc/xen/capabilities || fail "not the control domain"
XENSTORED_ROOTDIR=/run/xenstored xenstored --pid-file /run/xenstore.pid || fail "xenstored"
wait_for 20 "xenstored" xenstore-read -s /
xen-init-dom0 >/dev/null || fail "xen-init-dom0"
xenconsoled --pid-file=/run/xenconsoled.pid --log=guest --log-dir=/var/log/xen || fail "xenconsoled"
stage "toolstack up"

# A second node's vgpud on the same machine (loopback), for the assembly of a local and a remote vGPU.
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
head -c 32 /dev/urandom >/etc/vgpu/cluster.key
vgpud --foreground --executor emu --emu-memory 1G --socket /run/vgpud-peer.sock --xen off --worker-pool 0 \
    --any-user-host-code --node peer --remote-listen 127.0.0.1:7071 --peer dom0=127.0.0.1:7070 \
    --cluster-key /etc/vgpu/cluster.key --remote-timeout 30000 --log-level debug >/var/log/vgpud-peer.log 2>&1 &
peer_pid=$!
# Under emulation a busy vgpud may not answer pings for seconds: links wait 30 s before they give up.
vgpud --config /etc/vgpu/vgpud.conf --foreground --log-level debug --node dom0 --remote-listen 127.0.0.1:7070 \
    --peer peer=127.0.0.1:7071 --cluster-key /etc/vgpu/cluster.key --remote-timeout 30000 >/var/log/vgpud.log 2>&1 &
vgpud_pid=$!
wait_for 20 "vgpud to answer" vgpuctl ping
wait_for 30 "the link to node peer" sh -c "vgpuctl --json cluster | grep -q '\"state\":\"up\"'"
stage "vgpud up, linked to node peer"
base0_mem=$(vgpuctl --json | sed -n 's/.*"used_mem":\([0-9]*\).*/\1/p')

# The second guest first: it holds vGPU resources while the first one's programs run, and must not
# notice anything of them (a worker of the first one crashes).
xl create /etc/xen/vgpu-guest.cfg 'name="vgpu-guest2"' 'extra="console=hvc0 quiet vgpu_test=hold"' >/tmp/xl.out 2>&1 ||
    { cat /tmp/xl.out; fail "xl create (second guest)"; }
DOM2=$(xl domid vgpu-guest2) || fail "xl domid vgpu-guest2"
stage "second guest created (domain $DOM2)"
tail -f /var/log/xen/guest-vgpu-guest2.log 2>/dev/null | while IFS= read -r l; do echo "domU2| $l"; done &
wait_for 90 "the second guest to hold vGPU resources (data/holding)" xenstore-read /local/domain/$DOM2/data/holding
[ "$(xenstore-read /local/domain/$DOM2/data/holding)" = 1 ] || fail "second guest: $(xenstore-read /local/domain/$DOM2/data/holding)"
# Its session, its memory: what must stay as it is.
of_dom() { vgpuctl --json | tr '{' '\n' | grep -c "\"domain\":$1,"; }
dom2_mem() { vgpuctl --json | sed -n 's/.*"totals":{[^}]*"mem_bytes":\([0-9]*\).*/\1/p'; }
dom2_held=$(dom2_mem)
[ "$(of_dom $DOM2)" -ge 1 ] && [ "${dom2_held:-0}" -gt 0 ] || fail "vgpud does not list the second guest holding memory"
base_mem=$(vgpuctl --json | sed -n 's/.*"used_mem":\([0-9]*\).*/\1/p')
stage "second guest holds $dom2_held bytes"

xl create /etc/xen/vgpu-guest.cfg >/tmp/xl.out 2>&1 || { cat /tmp/xl.out; fail "xl create"; }
DOMID=$(xl domid vgpu-guest) || fail "xl domid"
stage "guest created (domain $DOMID)"
# The guest's console, live on ours, so that a stuck guest shows where it is.
tail -f /var/log/xen/guest-vgpu-guest.log 2>/dev/null | while IFS= read -r l; do echo "domU| $l"; done &
wait_for 30 "vgpud to offer the guest a vGPU" xenstore-read /local/domain/0/backend/vgpu/$DOMID/0/vgpus
stage "vGPU offered"
wait_for 330 "the guest's programs (data/result)" xenstore-read /local/domain/$DOMID/data/result
result=$(xenstore-read /local/domain/$DOMID/data/result)
[ "$result" = PASS ] || fail "guest: $(xenstore-read /local/domain/$DOMID/data/detail)"
stage "guest programs passed"
vgpuctl --json | grep -q '"reason":"signal 11 (SEGV)","error":700' || fail "vgpud did not report the guest's crashed worker"
[ "$(of_dom $DOM2)" -ge 1 ] || fail "the second guest lost its session when the first one's worker crashed"
grep -q "ready: emu executor, uid 65534 gid 65534, system-call filter on" /var/log/vgpud.log ||
    fail "the workers did not run as nobody under the system-call filter"
stage "a worker of the guest crashed; its program got CUDA_ERROR_ILLEGAL_ADDRESS, its other program and the second guest went on"
wait_for 30 "the guest to hold vGPU resources (data/holding)" xenstore-read /local/domain/$DOMID/data/holding
holding=$(xenstore-read /local/domain/$DOMID/data/holding)
[ "$holding" = 1 ] || fail "guest: $holding"
[ "$(of_dom $DOMID)" -ge 1 ] || fail "vgpud does not list a session of domain $DOMID"
vgpuctl status
vgpuctl list
vgpuctl --json show vgpu-guest | grep -q "\"domain\":$DOMID,\"domain_name\":\"vgpu-guest\"" ||
    fail "vgpuctl show vgpu-guest does not show the assembly of domain $DOMID"
vgpuctl show vgpu-guest
stage "vgpuctl list and show name the guest and its assembly"
stage "guest holds vGPU resources; destroying it"
xl destroy vgpu-guest || fail "xl destroy"
# Everything of the destroyed guest is freed; the second guest's session and memory are as they were.
guest_freed() {
    j=$(vgpuctl --json)
    [ "$(of_dom $DOMID)" = 0 ] && [ "$(echo "$j" | sed -n 's/.*"used_mem":\([0-9]*\).*/\1/p')" = "$base_mem" ] &&
        [ "$(dom2_mem)" = "$dom2_held" ]
}
wait_for 20 "vgpud to free everything of the destroyed guest" guest_freed
[ -z "$(xenstore-read /local/domain/0/backend/vgpu/$DOMID/0/state 2>/dev/null)" ] ||
    fail "the guest's backend entries are still in xenstore"
stage "vgpud freed the destroyed guest's sessions, memory and xenstore entries; the second guest holds on"
# The same round trip from a process of dom0 through vgpud's socket, in the same emulated machine
# (a few hundred: under emulation a round trip takes milliseconds, and at times far more).
VGPU_SOCKET=/run/vgpud.sock LD_LIBRARY_PATH=/opt/vgpu/lib bench_latency 200 >/tmp/latency.out 2>&1 ||
    { cat /tmp/latency.out; fail "bench_latency in dom0"; }
grep RESULT /tmp/latency.out | sed 's/^/DOM0-RTT /'
stage "dom0's round trip measured"

# The second guest's vGPUs detached by the toolstack while it runs (the backend's state set to
# Closing, as for any device): vgpud ends its sessions and removes the entries.
freed() {
    j=$(vgpuctl --json)
    [ "$(echo "$j" | sed -n 's/.*"totals":{"sessions":\([0-9]*\).*/\1/p')" = 0 ] &&
        [ "$(echo "$j" | sed -n 's/.*"used_mem":\([0-9]*\).*/\1/p')" = "$base0_mem" ]
}
xenstore-write /local/domain/0/backend/vgpu/$DOM2/0/state 5
wait_for 20 "vgpud to free everything of the detached vGPUs" freed
[ -z "$(xenstore-read /local/domain/0/backend/vgpu/$DOM2/0/state 2>/dev/null)" ] ||
    fail "the detached guest's backend entries are still in xenstore"
xenstore-exists /local/domain/$DOM2/device/vgpu/0 && fail "the detached guest's frontend entries are still in xenstore"
stage "vGPUs detached from a running guest: sessions, memory and entries freed"
# A guest whose assembly is a vGPU of this node and one of node peer's.
wait_for 60 "the link to node peer" sh -c "vgpuctl --json cluster | grep -q '\"state\":\"up\"'"
sed 's/^vgpu .*/vgpu = [ "device=0,memory=512M", "node=peer,device=0,memory=256M" ]/; s/^name .*/name = "vgpu-guest3"/' \
    /etc/xen/vgpu-guest.cfg >/etc/xen/vgpu-guest3.cfg
xl create /etc/xen/vgpu-guest3.cfg 'extra="console=hvc0 quiet vgpu_test=remote"' >/tmp/xl.out 2>&1 ||
    { cat /tmp/xl.out; fail "xl create (third guest)"; }
DOM3=$(xl domid vgpu-guest3) || fail "xl domid vgpu-guest3"
tail -f /var/log/xen/guest-vgpu-guest3.log 2>/dev/null | while IFS= read -r l; do echo "domU3| $l"; done &
wait_for 200 "the third guest's program (data/result)" xenstore-read /local/domain/$DOM3/data/result
[ "$(xenstore-read /local/domain/$DOM3/data/result)" = PASS ] || fail "third guest: $(xenstore-read /local/domain/$DOM3/data/detail)"
vgpuctl show vgpu-guest3
vgpuctl --json show vgpu-guest3 | grep -q '"index":1,"node":"peer","remote":true' ||
    fail "vgpuctl show vgpu-guest3 does not show its vGPU of node peer"
grep -q "node dom0's tenant .* gets device 0 here" /var/log/vgpud-peer.log || fail "node peer never served the guest's vGPU"
xl destroy vgpu-guest3 || fail "xl destroy (third guest)"
stage "a guest ran a two-device program on a vGPU of this node and one of node peer's"
kill -TERM $peer_pid; wait $peer_pid
grep -q "Sanitizer\|runtime error" /var/log/vgpud-peer.log && fail "sanitizer report in the peer vgpud's log"
xl destroy vgpu-guest2 || fail "xl destroy (second guest)"
vgpuctl ping >/dev/null || fail "vgpud gone"
# vgpud ends as asked; built with the sanitizers (make check), it reports leaks as it does.
kill -TERM $vgpud_pid
(sleep 30; kill -KILL $vgpud_pid) 2>/dev/null &
watchdog=$!
wait $vgpud_pid
rc=$?
kill $watchdog 2>/dev/null
grep -q "Sanitizer\|runtime error" /var/log/vgpud.log && fail "sanitizer report in vgpud's log"
[ $rc = 137 ] && fail "waited 30 s for vgpud to stop"
[ $rc = 0 ] || fail "vgpud exited with $rc"
stage "vgpud stopped cleanly"
finish PASS
