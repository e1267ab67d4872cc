#!/bin/bash
# The integration programs on a real GPU: each runs natively (the machine's own driver), then
# through a vGPU (vgpud with the cuda executor); both must succeed and print the same thing. Then
# several clients at once, and a client killed mid-stream whose memory vgpud must give back.
#   VGPU_BIN, VGPU_PROGS, VGPU_KERNELS: directories of the tools, the programs, the CUDA images.
#   VGPU_APPS, VGPU_APP_NAMES: the application suite's binaries and names; VGPU_APPS_EXPECTED: the
#   directory of their recorded outputs.
set -u
BIN=${VGPU_BIN:-build/bin}
PROGS=${VGPU_PROGS:-build/tests/host}
K=${VGPU_KERNELS:-build/tests/kernels}
APPS=${VGPU_APPS:-build/apps}
APPS_EXPECTED=${VGPU_APPS_EXPECTED:-tests/apps/expected}
APP_NAMES=${VGPU_APP_NAMES:-$(cd "$APPS" 2>/dev/null && ls *.static | sed 's/\.static$//')}
OUT=${VGPU_GPU_OUT:-build/tests/gpu}
mkdir -p "$OUT"
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi >/dev/null 2>&1; then
    echo "check-gpu: no NVIDIA GPU here"; exit 2
fi
sock=$(mktemp -u /tmp/vgpud-gpu.XXXXXX)
. "$(dirname "$0")/../../tools/vgpud-background.sh"
trap stop_vgpud EXIT
PYTHON=${VGPU_PYTHON:-python3}

failed=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }

# Lines a vGPU answers otherwise by design (what it withholds: tests/apps/by_design/NAME.WHERE, one
# extended regular expression a line): left out of both outputs before they are compared, and counted.
BY_DESIGN_DIR=${VGPU_BY_DESIGN:-$(dirname "$0")/../apps/by_design}
same_output() { # native output, vGPU output, by-design file (may be absent); sets by_design_note
    by_design_note=
    if [ -f "$3" ]; then
        local n
        n=$(diff <(grep -E -f "$3" "$1") <(grep -E -f "$3" "$2") | grep -c '^>')
        by_design_note=" ($n lines otherwise by design)"
        cmp -s <(grep -v -E -f "$3" "$1") <(grep -v -E -f "$3" "$2")
    else
        cmp -s "$1" "$2"
    fi
}
show_difference() { # the same arguments: what differs beyond the lines that may
    if [ -f "$3" ]; then diff <(grep -v -E -f "$3" "$1") <(grep -v -E -f "$3" "$2"); else diff "$1" "$2"; fi
}
compare() { # name, program and arguments; $by_design: the file of lines that may differ
    local name=$1; shift
    "$@" >"$OUT/$name.native" 2>&1; local rn=$?
    "$BIN/vgpu-run" --socket "$sock" -- "$@" >"$OUT/$name.vgpu" 2>&1; local rv=$?
    if [ $rn -ne 0 ]; then fail "$name: native run failed ($rn)"; sed 's/^/    /' "$OUT/$name.native"
    elif [ $rv -ne 0 ]; then fail "$name: vGPU run failed ($rv)"; sed 's/^/    /' "$OUT/$name.vgpu"
    elif ! same_output "$OUT/$name.native" "$OUT/$name.vgpu" "${by_design:-}"; then fail "$name: outputs differ"
        show_difference "$OUT/$name.native" "$OUT/$name.vgpu" "${by_design:-}"
    else pass "$name: $(tail -1 "$OUT/$name.vgpu")$by_design_note"; fi
}

# The parts, each of which may run alone (VGPU_GPU_PARTS, default "local remote"): local.sh, one
# vgpud's vGPUs (the programs, the applications, several clients, faults, the frameworks, quotas
# and swapping); remote.sh, vGPUs of a second vgpud reached over UCX.
for part in ${VGPU_GPU_PARTS:-local remote}; do
    case $part in
        local|remote) . "$(dirname "$0")/$part.sh" ;;
        *) echo "check-gpu: no part $part (local, remote)"; exit 2 ;;
    esac
done

echo "check-gpu: $failed failure(s)"
[ $failed -eq 0 ]
