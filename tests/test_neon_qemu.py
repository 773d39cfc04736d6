"""The NEON kernels, checked on any machine: scripts/test_neon.sh builds native/tests/kernel_test.cpp
for AArch64 (cross-compiled and run under qemu-aarch64 -cpu max on x86, natively on ARM), once
with the NEON unit as setup.py compiles it (dotprod) and once without dotprod, and compares
every NEON kernel with the scalar reference: quantizers and conversions byte for byte, the
packed 16-row-group GEMV/GEMM (Q4_0; in the fast order Q4_1, Q8_0, IQ4_NL) bit for bit, the
dot products within the bounds of test_kernels.py, test_kquants.py and test_iquants.py (how many
are bit-identical is reported: the i-quants follow ggml's ARM float order, not the reference's). The script installs g++-aarch64-linux-gnu and qemu-user if they are missing;
where it cannot (exit code 77) the test is skipped, or fails under EDGEINFER_REQUIRE_MODELS=1
or CI=true, where the toolchain is expected to be there (scripts/test.sh installs it).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from support.availability import unavailable
from support.paths import REPO_ROOT, SCRIPTS_DIR

SCRIPT = SCRIPTS_DIR / "test_neon.sh"

# What the NEON table must override (the rest may stay scalar).
EXPECTED_OVERRIDES = [f"vec_dot:{t}" for t in ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K",
                                               "q5_K", "q6_K", "iq4_nl", "iq4_xs", "mxfp4", "f16",
                                               "f32", "iq1_s", "iq1_m", "tq1_0", "tq2_0")]
EXPECTED_OVERRIDES += [f"vec_dot:{t}" for t in ("iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s")]
EXPECTED_OVERRIDES += ["from_float:q8_0", "from_float:q8_1", "packed:q4_0"]


@pytest.fixture(scope="module")
def neon_run(tmp_path_factory) -> subprocess.CompletedProcess:
    if not sys.platform.startswith("linux"):
        pytest.skip("the NEON kernel test needs Linux (qemu user-mode emulation or an ARM64 host)")
    env = dict(os.environ, EDGEINFER_NEON_BUILD=str(tmp_path_factory.mktemp("neon_build")))
    env.pop("EDGEINFER_ISA", None)  # the test checks that dispatch picks NEON by itself
    run = subprocess.run(["bash", str(SCRIPT)], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                         timeout=900)
    if run.returncode == 77:
        unavailable("AArch64 cross compiler / qemu-aarch64 not available: " + run.stderr.strip(), in_ci=True)
    return run


def test_every_neon_kernel_matches_the_scalar_reference_under_qemu(neon_run):
    out = neon_run.stdout
    failures = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert neon_run.returncode == 0, "\n".join(failures) or (out[-3000:] + neon_run.stderr[-3000:])
    # Both builds (dotprod and the fallback) ran every check and passed them all.
    totals = re.findall(r"^kernel_test: (\d+) passed, (\d+) failed$", out, re.M)
    assert len(totals) == 2, out[-3000:]
    assert all(int(passed) > 0 and failed == "0" for passed, failed in totals), totals


def test_dispatch_selects_neon_on_a_dotprod_cpu(neon_run):
    assert neon_run.stdout.count("PASS dispatch selects neon") == 2, neon_run.stdout[-3000:]


def test_neon_table_covers_the_quantized_dot_products_and_q8_quantizers(neon_run):
    lines = [line for line in neon_run.stdout.splitlines() if line.startswith("== neon overrides:")]
    assert len(lines) == 2, neon_run.stdout[-3000:]
    for line in lines:
        overrides = set(line.split(":", 1)[1].split())
        missing = [entry for entry in EXPECTED_OVERRIDES if entry not in overrides]
        assert not missing, line
