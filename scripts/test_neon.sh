#!/usr/bin/env bash
# The NEON kernels, tested on an x86 machine: cross-compiles native/tests/kernel_test.cpp for
# AArch64 (Debian's g++-aarch64-linux-gnu, linked statically so qemu needs no sysroot) and runs
# it under qemu user-mode emulation with a CPU that has the dot-product extension
# (qemu-aarch64 -cpu max). The test compares every NEON kernel with the scalar reference and
# checks that dispatch.cpp selects NEON there. Two builds: the NEON unit with dotprod (as
# setup.py compiles it) and without (the dot-product fallback in cpu/arm/quants_neon.h).
# On an AArch64 machine the same two builds are made and run natively.
#
# Usage: scripts/test_neon.sh [--native]
#   --native   also build and run the same test natively on x86 (AVX2 / AVX-512 units).
# Installs the two packages with apt-get if they are missing. EDGEINFER_NEON_BUILD names the
# build folder (default build/neon_test). Exit code: 0 if every check passed, 77 if the
# toolchain is missing and cannot be installed, else non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."

NATIVE=0
for arg in "$@"; do
    case "$arg" in
        --native) NATIVE=1 ;;
        *) echo "usage: $0 [--native]" >&2; exit 2 ;;
    esac
done

# On an AArch64 machine the test is built and run natively; elsewhere it needs the cross
# compiler and qemu. Exit code 77 (the automake convention for "skipped") if they are missing
# and cannot be installed.
if [ "$(uname -m)" = aarch64 ]; then
    ARM_CXX=g++
    ARM_RUN=()
else
    ARM_CXX=aarch64-linux-gnu-g++
    ARM_RUN=(qemu-aarch64 -cpu max)
    if ! command -v "$ARM_CXX" >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
        if ! command -v apt-get >/dev/null; then
            echo "test_neon.sh: $ARM_CXX or qemu-aarch64 missing and no apt-get to install them" >&2
            exit 77
        fi
        SUDO=$([ "$(id -u)" -eq 0 ] && echo "" || echo sudo)
        if ! { $SUDO apt-get update -qq &&
               DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq g++-aarch64-linux-gnu qemu-user; }; then
            echo "test_neon.sh: could not install g++-aarch64-linux-gnu and qemu-user" >&2
            exit 77
        fi
    fi
fi

BUILD="${EDGEINFER_NEON_BUILD:-build/neon_test}"
mkdir -p "$BUILD"

# The baseline units the test links (no pybind11, no Python): dispatch, the scalar references.
BASELINE=(
    native/tests/kernel_test.cpp
    native/src/cpu/dispatch.cpp
    native/src/cpu/ops_ref.cpp
    native/src/cpu/gemm.cpp
    native/src/cpu/attn_kvq_ref.cpp
    native/src/cpu/repack.cpp
    native/src/common/weight_arena.cpp
    native/src/quant/ref_float.cpp
    native/src/quant/ref_legacy.cpp
    native/src/quant/ref_kquants.cpp
    native/src/quant/ref_iquants.cpp
    native/src/quant/ref_mxfp4.cpp
    native/src/quant/ref_iq1_tq.cpp
    native/src/quant/ref_iq23.cpp
    native/src/cpu/ref_table.cpp
    native/src/quant/types.cpp
)
COMMON=(-O3 -std=c++17 -fno-math-errno -Wall -Wno-unused-function -Inative/src)  # setup.py's COMMON_FLAGS

# compile CXX OUT_DIR FLAGS... -- SOURCES...: one object per source, in parallel (2 at a time).
compile() {
    local cxx="$1" out="$2"
    shift 2
    local flags=()
    while [ "$1" != "--" ]; do flags+=("$1"); shift; done
    shift
    mkdir -p "$out"
    local pids=() src
    for src in "$@"; do
        "$cxx" "${COMMON[@]}" "${flags[@]}" -c "$src" -o "$out/$(basename "${src%.cpp}").o" &
        pids+=($!)
        if ((${#pids[@]} >= 2)); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
    done
    local pid
    for pid in "${pids[@]}"; do wait "$pid"; done
}

run_step() {  # label, command...: runs it and prints its wall time
    local label="$1" start rc=0
    shift
    start=$(date +%s%N)
    "$@" || rc=$?
    local ms=$((($(date +%s%N) - start) / 1000000))
    printf '[%s: %d.%01d s]\n' "$label" $((ms / 1000)) $((ms % 1000 / 100))
    return $rc
}

# ---- AArch64 under qemu ----
ARM="$BUILD/aarch64"
build_arm() {
    local cxx="$ARM_CXX"
    compile $cxx "$ARM/base" -DEDGEINFER_HAVE_NEON=1 -- "${BASELINE[@]}"
    compile $cxx "$ARM/dotprod" -march=armv8.2-a+dotprod+fp16 -- native/src/cpu/arm/neon.cpp  # setup.py's flags
    compile $cxx "$ARM/plain" -march=armv8-a -- native/src/cpu/arm/neon.cpp
    $cxx -static -o "$ARM/kernel_test" "$ARM"/base/*.o "$ARM/dotprod/neon.o"
    $cxx -static -o "$ARM/kernel_test_nodotprod" "$ARM"/base/*.o "$ARM/plain/neon.o"
}
run_step "cross-compile aarch64" build_arm

status=0
echo "== ${ARM_RUN[*]:-native}: NEON unit with dotprod (setup.py's build)"
run_step "run (dotprod)" "${ARM_RUN[@]}" "$ARM/kernel_test" --expect-isa neon || status=1
echo "== ${ARM_RUN[*]:-native}: NEON unit built without dotprod (the fallback path)"
run_step "run (no dotprod)" "${ARM_RUN[@]}" "$ARM/kernel_test_nodotprod" --expect-isa neon || status=1

# ---- x86 natively (optional) ----
X86="$BUILD/x86"
build_x86() {
    local avx2=(-mavx2 -mfma -mf16c)
    local avx512=("${avx2[@]}" -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni)
    # The x86 units with setup.py's flags (its ISA_SOURCES); the x86 kernels look halves up in
    # common/fp16_table.cpp.
    compile g++ "$X86/base" -DEDGEINFER_HAVE_AVX2=1 -DEDGEINFER_HAVE_AVX512=1 -- "${BASELINE[@]}" \
        native/src/common/fp16_table.cpp
    compile g++ "$X86/isa" "${avx2[@]}" -- native/src/cpu/x86/avx2.cpp
    compile g++ "$X86/isa" "${avx2[@]}" -ffp-contract=fast -- native/src/cpu/x86/ops_avx2.cpp \
        native/src/cpu/x86/attn_kvq_fma.cpp
    compile g++ "$X86/isa" "${avx2[@]}" -ffp-contract=off -- native/src/cpu/x86/gemm_avx2.cpp \
        native/src/cpu/x86/attn_prefill_avx2.cpp native/src/cpu/x86/attn_kvq_avx2.cpp \
        native/src/cpu/x86/gemm_packed_avx2.cpp native/src/cpu/x86/gemm_packed_q236k_avx2.cpp \
        native/src/cpu/x86/gemm_packed_iq4xs_avx2.cpp native/src/cpu/x86/gemm_kquants_avx2.cpp \
        native/src/cpu/x86/attn_span_f16_avx2.cpp native/src/cpu/x86/gemm_packed_q45k_avx2.cpp
    compile g++ "$X86/isa" "${avx512[@]}" -- native/src/cpu/x86/avx512.cpp native/src/cpu/x86/gemm_avx512.cpp \
        native/src/cpu/x86/gemm_kquants_avx512.cpp
    compile g++ "$X86/isa" "${avx512[@]}" -ffp-contract=fast -- native/src/cpu/x86/ops_avx512.cpp
    compile g++ "$X86/isa" "${avx512[@]}" -ffp-contract=off -- native/src/cpu/x86/attn_prefill_avx512.cpp native/src/cpu/x86/gemm_packed_avx512.cpp \
        native/src/cpu/x86/gemm_packed_q236k_avx512.cpp native/src/cpu/x86/gemm_packed_iq4xs_avx512.cpp \
        native/src/cpu/x86/gemm_packed_q45k_avx512.cpp
    g++ -o "$X86/kernel_test" "$X86"/base/*.o "$X86"/isa/*.o
}
if ((NATIVE)) && [ "$(uname -m)" = x86_64 ]; then
    run_step "compile x86" build_x86
    echo "== native x86"
    run_step "native run" "$X86/kernel_test" || status=1
fi
exit $status
