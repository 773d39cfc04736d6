#!/usr/bin/env bash
# The AVX-512 kernels, checked for exactness on a CPU without AVX-512. Builds the extension a
# second time into its own folder with EDGEINFER_EMULATE_AVX512=1 (setup.py): the AVX-512 units'
# intrinsics become SIMDe's portable ones (native/tests/avx512_emulation/avx512_emulated.h), and
# dispatch lets the AVX-512 table run wherever AVX2 does. Then runs pytest against that build, where
# the AVX-512 table is the one selected and the ISA-parametrized tests run their AVX-512 cases only
# (the scalar and AVX2 ones would repeat the main run's); the tests that hold our AVX-512 table to
# llama.cpp's AVX-512 fixture bits (tests/support/reference_build.py) apply. Speed means nothing in
# this build.
#
# Usage: scripts/test_avx512_emulated.sh [TEST FILES...]
#   With no arguments runs the kernel and exactness tests listed below; pytest options go in
#   PYTEST_ADDOPTS. Installs libsimde-dev with
#   apt-get if it is missing. EDGEINFER_AVX512_EMULATED_BUILD names the build folder (default
#   build/avx512_emulated). Exit code: pytest's; 77 if SIMDe is missing and cannot be installed or
#   this is not an x86-64 machine with AVX2.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"

if [ "$(uname -m)" != x86_64 ] || ! grep -qw avx2 /proc/cpuinfo; then
    echo "test_avx512_emulated.sh: needs an x86-64 CPU with AVX2" >&2
    exit 77
fi
if [ ! -f /usr/include/simde/x86/avx512.h ]; then
    if ! command -v apt-get >/dev/null; then
        echo "test_avx512_emulated.sh: SIMDe (libsimde-dev) missing and no apt-get to install it" >&2
        exit 77
    fi
    SUDO=$([ "$(id -u)" -eq 0 ] && echo "" || echo sudo)
    if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libsimde-dev; }; then
        echo "test_avx512_emulated.sh: could not install libsimde-dev" >&2
        exit 77
    fi
fi

BUILD="${EDGEINFER_AVX512_EMULATED_BUILD:-build/avx512_emulated}"
# A first build starts from the product build's objects (setup.py keeps them in build/temp.core):
# only the AVX-512 units and dispatch.cpp differ, so only they are compiled again.
if [ ! -d "$BUILD/temp" ] && [ -d build/temp.core ]; then
    mkdir -p "$BUILD"
    cp -a build/temp.core "$BUILD/temp"
    rm -f "$BUILD"/temp/native/src/cpu/x86/*avx512*.o "$BUILD/temp/native/src/cpu/dispatch.o"
fi
mkdir -p "$BUILD"
start=$(date +%s)
EDGEINFER_EMULATE_AVX512=1 "$PYTHON" setup.py -q build_py --build-lib "$BUILD/lib" \
    build_ext --build-lib "$BUILD/lib" --build-temp "$BUILD/temp" >"$BUILD/build.log" 2>&1 ||
    { tail -40 "$BUILD/build.log" >&2; exit 1; }
echo "[emulated build: $(($(date +%s) - start)) s]"

# PYTHONSAFEPATH: `python -m` and `-c` would put the working directory (this tree, whose edgeinfer
# has the product's extension) ahead of PYTHONPATH; children inherit it (tests/support/cli.py).
export PYTHONSAFEPATH=1 PYTHONPATH="$BUILD/lib"
unset EDGEINFER_ISA
# Only the AVX-512 units differ from the product build: its scalar and AVX2 tables, which the main
# run tests, stay the tests' references but are not tested again (tests/support/isas.py).
export EDGEINFER_TEST_ISAS=avx512
"$PYTHON" -c 'from edgeinfer import _core; import sys; sys.exit(_core.isa() != "avx512")' ||
    { echo "test_avx512_emulated.sh: the emulated build does not select its AVX-512 table" >&2; exit 1; }

TESTS=(
    tests/test_kernels.py tests/test_gemm.py tests/test_attention_prefill.py tests/test_float_order.py
    tests/test_kquants.py tests/test_iquants.py tests/test_iq1_tq.py tests/test_iq23.py tests/test_mxfp4.py
    tests/test_repack.py tests/test_ops.py tests/test_kv_types.py tests/test_kv_centered.py
    tests/test_matmul_same_input.py tests/test_decode_batch.py tests/test_llamacpp_exact.py
)
if (($#)); then TESTS=("$@"); fi

"$PYTHON" -m pytest -q -p no:cacheprovider "${TESTS[@]}"
