#!/bin/bash
# Build what the Xen smoke test boots, from Debian's packages and the project's build:
#   $XEN_OUT/xen              Xen 4.17, decompressed (QEMU's multiboot loader wants the plain ELF)
#   $XEN_OUT/vmlinux          Debian's kernel as a stripped ELF (dom0 and domU: no XZ to unpack
#                             under software emulation)
#   $XEN_OUT/dom0-initrd.img  dom0: busybox, the Xen toolstack, vgpud, its workers and vgpuctl, the domU's kernel
#                             and initramfs (the guest: busybox, libcuda.so.1, libnvidia-ml.so.1, test programs)
# The hypervisor and kernel packages are only downloaded and unpacked, never installed; they are
# kept in $XEN_CACHE between runs.
#   VGPU_BUILD  the project's build directory (default build)
#   VGPU_SAN_BUILD  a build with ASan and UBSan (`make check` passes its own): dom0's vgpud and
#               vgpuctl come from it, so that a hostile guest meets the sanitizers, and the guest
#               runs a few programs with its libcuda.so.1 too
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
B=$(cd "${VGPU_BUILD:-$TOP/build}" && pwd)
DB=$B
[ -n "${VGPU_SAN_BUILD:-}" ] && DB=$(cd "$VGPU_SAN_BUILD" && pwd)
XEN_OUT=${XEN_OUT:-$B/xen}
XEN_CACHE=${XEN_CACHE:-$B/xen-cache}
XENVER=4.17
t0=$(date +%s.%N)
step() { echo "[xen build $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N)-$t0}")s] $*"; }

# ---- host packages (the toolstack and libraries come from the same Debian build as the hypervisor)
need=""
for p in qemu-system-x86 busybox-static cpio lz4 xen-utils-$XENVER xenstore-utils libxen-dev binutils; do
    dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
done
if [ -n "$need" ]; then
    step "installing$need"
    SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $need
fi

# ---- hypervisor and kernel, downloaded once
mkdir -p "$XEN_CACHE/debs" "$XEN_OUT"
KPKG=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
KVER=${KPKG#linux-image-}
(
    cd "$XEN_CACHE/debs"
    if ! ls xen-hypervisor-$XENVER-amd64_*.deb "$KPKG"_*.deb >/dev/null 2>&1; then
        step "downloading xen-hypervisor-$XENVER-amd64 and $KPKG"
        apt-get download "xen-hypervisor-$XENVER-amd64" "$KPKG" >/dev/null
    fi
)
STAMP="$(cd "$XEN_CACHE/debs" && ls xen-hypervisor-$XENVER-amd64_*.deb "$KPKG"_*.deb | tr '\n' ' ')"
X=$XEN_CACHE/unpacked
if [ "$(cat "$XEN_CACHE/unpacked.stamp" 2>/dev/null)" != "$STAMP" ] || [ ! -s "$XEN_CACHE/vmlinux" ]; then
    rm -rf "$X"; mkdir -p "$X"
    dpkg -x "$XEN_CACHE"/debs/xen-hypervisor-$XENVER-amd64_*.deb "$X"
    dpkg-deb --fsys-tarfile "$XEN_CACHE"/debs/"$KPKG"_*.deb |
        tar -x -C "$X" --wildcards './boot/*' './lib/modules/*/kernel/drivers/xen/*'
    zcat "$X/boot/xen-$XENVER-amd64.gz" >"$XEN_CACHE/xen"
    python3 - "$X/boot/vmlinuz-$KVER" "$XEN_CACHE/vmlinux.full" <<'PY'
import lzma, sys
d = open(sys.argv[1], "rb").read()
i = d.find(b"\xfd7zXZ\x00")
assert i > 0, "no XZ payload in the bzImage"
v = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(d[i:])
assert v[:4] == b"\x7fELF"
open(sys.argv[2], "wb").write(v)
PY
    objcopy --strip-all "$XEN_CACHE/vmlinux.full" "$XEN_CACHE/vmlinux"
    rm -f "$XEN_CACHE/vmlinux.full"
    echo "$STAMP" >"$XEN_CACHE/unpacked.stamp"
    step "unpacked Xen $XENVER and kernel $KVER"
fi
cp "$XEN_CACHE/xen" "$XEN_OUT/xen"
cp "$XEN_CACHE/vmlinux" "$XEN_OUT/vmlinux"

# ---- root file systems
copy_bin() { # root file [destination]: a program or library and every library it needs
    local root=$1 src=$2 dst=${3:-$2}
    mkdir -p "$root$(dirname "$dst")"
    cp -L "$src" "$root$dst"
    ldd "$src" 2>/dev/null | awk '/=> \//{print $3} /^[ \t]*\/lib/{print $1}' | while read -r lib; do
        [ -e "$root$lib" ] || { mkdir -p "$root$(dirname "$lib")"; cp -L "$lib" "$root$lib"; }
    done
}
# Libraries loaded with dlopen (ldd does not list them): glibc's libgcc_s, and Xen's libraries,
# which the project loads at run time.
copy_dlopened() { # root soname...
    local root=$1; shift
    for so in "$@"; do
        local f; f=$(ldconfig -p | awk -v n="$so" '$1 == n && !found {print $NF; found = 1}')
        [ -n "$f" ] || { echo "xen build: $so not found" >&2; exit 1; }
        copy_bin "$root" "$f"
    done
}
base_root() {
    local r=$1
    rm -rf "$r"
    mkdir -p "$r"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,proc,sys,dev,run,tmp,etc,root,var/log,var/lib,opt/vgpu}
    ln -s ../run "$r/var/run"
    ln -s ../run/lock "$r/var/lock"
    cp /bin/busybox "$r/bin/busybox"
    for a in $("$r/bin/busybox" --list-full); do [ -e "$r/$a" ] || ln -s /bin/busybox "$r/$a"; done
    mkdir -p "$r/lib/modules/$KVER"
    for m in xen-privcmd xenfs xen-evtchn xen-gntdev xen-gntalloc; do
        cp "$(find "$X/lib/modules/$KVER" -name "$m.ko*" | head -1)" "$r/lib/modules/$KVER/$m.ko"
    done
    copy_bin "$r" /usr/bin/xenstore
    for t in read write ls list rm exists watch; do ln -s xenstore "$r/usr/bin/xenstore-$t"; done
    copy_dlopened "$r" libgcc_s.so.1 libxenstore.so.4 libxengnttab.so.1 libxenevtchn.so.1 "libxenvchan.so.$XENVER"
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$r/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$r/etc/group"
}
mkcpio() { (cd "$1" && find . | cpio -o -H newc --quiet | $2) >"$3"; }

# The guest: the project's libcuda.so.1 and driver-API test programs.
D=$XEN_CACHE/domU-root
base_root "$D"
copy_bin "$D" "$B/lib/libcuda.so.1" /opt/vgpu/lib/libcuda.so.1
copy_bin "$D" "$B/lib/libnvidia-ml.so.1" /opt/vgpu/lib/libnvidia-ml.so.1
for p in prog_copies prog_streams prog_vecadd prog_hold prog_fault prog_busy prog_quota prog_shm prog_peer prog_nvml prog_printf prog_host_pointer; do
    copy_bin "$D" "$B/tests/host/$p" "/opt/vgpu/bin/$p"
done
copy_bin "$D" "$B/tests/xen/xen_hostile" /opt/vgpu/bin/xen_hostile
copy_bin "$D" "$B/benchmarks/bench_latency" /opt/vgpu/bin/bench_latency
cp "$B/tests/kernels/basic.emu.so" "$D/opt/vgpu/basic.emu.so"
if [ "$DB" != "$B" ]; then # the sanitized frontend, and the ASan runtime to preload into programs
    copy_bin "$D" "$DB/lib/libcuda.so.1" /opt/vgpu/lib-san/libcuda.so.1
    ldd "$DB/lib/libcuda.so.1" | awk '/libasan/{print $3}' >"$D/opt/vgpu/lib-san/preload"
fi
install -m 755 "$HERE/domU-init.sh" "$D/init"
mkcpio "$D" "gzip -1" "$XEN_CACHE/initrd-domU.cpio.gz"
step "guest image $(du -h "$XEN_CACHE/initrd-domU.cpio.gz" | cut -f1)"

# dom0: the toolstack and vgpud.
R=$XEN_CACHE/dom0-root
base_root "$R"
for b in xl xenstored xenconsoled xen-init-dom0; do copy_bin "$R" "/usr/lib/xen-$XENVER/bin/$b"; done
copy_dlopened "$R" "libxenlight.so.$XENVER" "libxlutil.so.$XENVER"
copy_bin "$R" "$DB/bin/vgpud" /opt/vgpu/bin/vgpud
copy_bin "$R" "$DB/bin/vgpu-worker" /opt/vgpu/bin/vgpu-worker
copy_bin "$R" "$DB/bin/vgpuctl" /opt/vgpu/bin/vgpuctl
# The round trip of a dom0 process through the host socket: the guest's on the same footing.
copy_bin "$R" "$B/lib/libcuda.so.1" /opt/vgpu/lib/libcuda.so.1
copy_bin "$R" "$B/benchmarks/bench_latency" /opt/vgpu/bin/bench_latency
mkdir -p "$R/etc/xen" "$R/etc/vgpu" "$R/var/lib/xen" "$R/var/log/xen" "$R/boot"
echo 'autoballoon="off"' >"$R/etc/xen/xl.conf"
install -m 644 "$TOP/configs/vgpu-guest.cfg" "$R/etc/xen/vgpu-guest.cfg"
# The second guest of the test is the same one under another name (vgpud reads NAME.cfg).
ln -s vgpu-guest.cfg "$R/etc/xen/vgpu-guest2.cfg"
install -m 644 "$TOP/configs/vgpud.conf" "$R/etc/vgpu/vgpud.conf"
cp "$XEN_CACHE/vmlinux" "$R/boot/domU-kernel"
cp "$XEN_CACHE/initrd-domU.cpio.gz" "$R/boot/initrd-domU.cpio.gz"
install -m 755 "$HERE/dom0-init.sh" "$R/init"
mkcpio "$R" "lz4 -l -1 -q" "$XEN_OUT/dom0-initrd.img"
step "dom0 image $(du -h "$XEN_OUT/dom0-initrd.img" | cut -f1)"
