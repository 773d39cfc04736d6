"""The AVX-512 kernels on a CPU without AVX-512: scripts/test_avx512_emulated.sh builds the
extension with the AVX-512 units on SIMDe's portable intrinsics and runs the kernel and exactness
tests against that build, where the AVX-512 table is selected. Those include
test_llamacpp_exact.py, whose llama.cpp fixture bits come from an AVX-512 build of llama.cpp
(support/reference_build.py): the emulated run holds our AVX-512 table to them bit for bit.

On a CPU with AVX-512 the whole suite runs the real table and this test is skipped, as it is
where there is no AVX2 (ARM). The script
installs libsimde-dev if it is missing; where it cannot (exit code 77) the test is skipped, or
fails under EDGEINFER_REQUIRE_MODELS=1 or CI=true."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from edgeinfer import _core
from support.availability import unavailable
from support.paths import REPO_ROOT, SCRIPTS_DIR

pytestmark = [
    pytest.mark.skipif("avx512" in _core.available_isas(),
                       reason="this CPU runs the AVX-512 table natively in every other test"),
    # The emulated units run on AVX2 halves: nothing to build them for elsewhere (ARM, pre-AVX2 x86).
    pytest.mark.skipif("avx2" not in _core.available_isas(), reason="the emulated AVX-512 table needs AVX2"),
]


def test_the_avx512_table_passes_the_kernel_and_exactness_tests_under_emulation():
    env = {k: v for k, v in os.environ.items() if k not in ("EDGEINFER_ISA", "PYTHONPATH")}
    env["PYTHON"] = sys.executable
    run = subprocess.run(["bash", str(SCRIPTS_DIR / "test_avx512_emulated.sh")], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True, timeout=1800)
    if run.returncode == 77:
        unavailable("cannot build the emulated AVX-512 table: " + run.stderr.strip(), in_ci=True)
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    # pytest's summary line: a real run with passes and no failures.
    assert re.search(r"\b\d{3,} passed\b", summary) and "failed" not in summary, summary
