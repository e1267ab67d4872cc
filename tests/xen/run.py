#!/usr/bin/env python3
"""Boot the Xen smoke test under QEMU (software emulation) and follow it on the serial console.

Each stage has a deadline; when one passes, the test fails saying which stage it was waiting for,
instead of hanging. Exit status 0 only on `XEN-SMOKE: PASS`.

    run.py --out DIR [--log FILE] [--timeout S] [--accel tcg|kvm]
"""
import argparse
import os
import re
import select
import signal
import subprocess
import sys
import time

# (pattern, what it means, seconds allowed since the previous stage)
STAGES = [
    (r"Xen version 4\.", "Xen starts", 30),
    (r"Linux version", "dom0's kernel starts", 30),
    (r"XEN-STAGE .* dom0 userspace", "dom0's /init runs", 60),
    (r"XEN-STAGE .* toolstack up", "xenstored and xenconsoled run", 30),
    (r"XEN-STAGE .* vgpud up", "vgpud answers", 30),
    (r"XEN-STAGE .* second guest created", "xl creates the second guest", 40),
    (r"XEN-STAGE .* second guest holds", "the second guest holds vGPU resources", 100),
    (r"XEN-STAGE .* guest created", "xl creates the guest", 40),
    (r"XEN-STAGE .* vGPU offered", "vgpud offers the guest a vGPU", 40),
    (r"XEN-STAGE .* guest programs passed", "the guest's CUDA programs pass", 340),
    (r"XEN-STAGE .* a worker of the guest crashed", "vgpud reports the guest's crashed worker", 20),
    (r"XEN-STAGE .* destroying it", "the guest holds vGPU resources", 40),
    (r"XEN-STAGE .* vgpud freed", "vgpud frees the destroyed guest", 40),
    (r"XEN-STAGE .* dom0's round trip measured", "round trips from a process of dom0", 60),
    (r"XEN-STAGE .* vGPUs detached", "vgpud frees the detached guest's vGPUs", 30),
    (r"XEN-STAGE .* a guest ran a two-device program", "a guest's assembly with another node's vGPU", 200),
    (r"XEN-SMOKE: PASS", "the verdict", 40),
]
# After a stage's deadline, how long dom0's script may take to fail by itself and print its state.
LATE_GRACE_S = 30
FATAL = r"Hardware Dom0 crashed|Panic on CPU|Kernel panic - not syncing|KVM internal error"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="where build.sh put xen, vmlinux and dom0-initrd.img")
    ap.add_argument("--log", default=None)
    ap.add_argument("--timeout", type=float, default=170)
    ap.add_argument("--accel", default="tcg", choices=["tcg", "kvm"])
    a = ap.parse_args()
    log_path = a.log or os.path.join(a.out, "serial.log")
    o = a.out
    # RDRAND lets the guests' entropy pool fill at boot (xl stalls in libuuid otherwise).
    cmd = ["qemu-system-x86_64", "-machine", "pc", "-accel", a.accel, "-m", "2048", "-smp", "2",
           "-display", "none", "-vga", "none", "-nodefaults", "-no-reboot", "-serial", "stdio", "-monitor", "none",
           "-kernel", f"{o}/xen",
           "-append", "console=com1 com1=115200,8n1 dom0_mem=768M,max:768M dom0_max_vcpus=2 noreboot",
           "-initrd", f"{o}/vmlinux console=hvc0 earlyprintk=xen,{o}/dom0-initrd.img"]
    if a.accel == "tcg":
        cmd += ["-cpu", "qemu64,+rdrand,+rdseed"]
    t0 = time.monotonic()
    stage, stage_t = 0, 0.0
    late = None  # when the stage's deadline passed
    verdict, reason = None, ""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    buf = b""
    with open(log_path, "w") as log:
        while verdict is None:
            now = time.monotonic() - t0
            pattern, what, allowed = STAGES[stage]
            if now - stage_t > allowed and late is None:
                # dom0's script fails by itself a little later, printing vgpud's log: wait for that.
                late, reason = now, "no sign within %d s that %s" % (allowed, what)
            if late is not None and now - late > LATE_GRACE_S:
                verdict = "FAIL"
                break
            if now > a.timeout:
                verdict, reason = "FAIL", "the whole test took more than %d s (waiting until %s)" % (a.timeout, what)
                break
            ready, _, _ = select.select([p.stdout], [], [], 0.5)
            if not ready:
                if p.poll() is not None:
                    verdict, reason = "FAIL", "QEMU exited while waiting until %s" % what
                continue
            chunk = os.read(p.stdout.fileno(), 65536)
            if not chunk:
                verdict, reason = "FAIL", "QEMU exited while waiting until %s" % what
                break
            buf += chunk
            while b"\n" in buf and verdict is None:
                line, buf = buf.split(b"\n", 1)
                text = line.decode("utf-8", "replace").rstrip("\r")
                log.write("[%8.3f] %s\n" % (now, text))
                if re.search(r"XEN-STAGE|XEN-SMOKE|GUEST|xen_hostile|vgpud\[|FAIL", text):
                    print("[%7.2f] %s" % (now, text), flush=True)
                if re.search(FATAL, text):
                    verdict, reason = "FAIL", "crash: " + text
                m = re.search(r"XEN-SMOKE: FAIL(.*)", text)
                if m:
                    verdict, reason = "FAIL", (reason + "; then " if late else "") + m.group(1).strip()
                while verdict is None and late is None and re.search(STAGES[stage][0], text):
                    stage, stage_t = stage + 1, now
                    if stage == len(STAGES):
                        verdict = "PASS"
                        break
                    if not re.search(STAGES[stage][0], text):
                        break
        # Let Xen power the machine off; the rest of the console goes to the log.
        deadline = time.monotonic() + 10
        while p.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([p.stdout], [], [], 0.5)
            if ready:
                chunk = os.read(p.stdout.fileno(), 65536)
                if not chunk:
                    break
                log.write(chunk.decode("utf-8", "replace"))
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
    total = time.monotonic() - t0
    if verdict == "PASS":
        print("check-xen: PASS in %.1f s (serial log: %s)" % (total, log_path))
        return 0
    # CI keeps only what is printed: the console's last lines say what the stage was waiting on.
    with open(log_path, errors="replace") as log:
        tail = log.readlines()[-40:]
    print("check-xen: the serial console's last %d lines:\n%s" % (len(tail), "".join(tail)), end="")
    print("check-xen: FAIL after %.1f s: %s (serial log: %s)" % (total, reason, log_path))
    return 1


if __name__ == "__main__":
    sys.exit(main())
