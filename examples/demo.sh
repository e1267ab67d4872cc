#!/bin/sh
# `make demo`: start vgpud, run an unmodified CUDA program through a vGPU, show what vgpud saw.
# Uses the GPU when vgpud finds one (cuda executor), else the emu executor.
#   $1: the build directory (build)
set -eu
O=${1:-build}
BIN=$O/bin
dir=$(mktemp -d /tmp/vgpu-demo.XXXXXX)
sock=$dir/vgpud.sock
echo "== starting vgpud (executor: auto) on $sock"
. "$(dirname "$0")/../tools/vgpud-background.sh"
trap 'stop_vgpud; rm -rf "$dir"' EXIT INT TERM
start_vgpud "$BIN" "$sock" "$dir/vgpud.log" auto info
if "$BIN/vgpuctl" --socket "$sock" --json | grep -q '"executor":"cuda"'; then
    module=$O/tests/kernels/basic.fatbin
    echo "== vgpud drives the GPU (cuda executor); the program's kernel is a CUDA fatbin"
else
    module=$O/tests/kernels/basic.emu.so
    echo "== no usable GPU here: vgpud runs the emu executor (CPU); the program's kernel is an emu module"
fi
echo
echo "== running examples/vgpu_demo through a vGPU: vgpu-run --socket $sock -- vgpu_demo $module"
"$BIN/vgpu-run" --socket "$sock" -- "$O/examples/vgpu_demo" "$module"
echo
echo "== what vgpud saw (vgpuctl status)"
"$BIN/vgpuctl" --socket "$sock" status
echo
echo "== vgpud's log"
sed 's/^/  /' "$dir/vgpud.log"
