"""scripts/stream_packed_gemv.py: one packed GEMV kernel streaming copies of a packed matrix
(edgeinfer._testing.stream_packed_gemv), set against the plain read."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from edgeinfer import _testing
from support.cli import child_env
from support.paths import SCRIPTS_DIR

Q8_0, Q4_K = 8, 12


def test_more_weights_take_more_time():
    small_bytes, small_s = _testing.stream_packed_gemv(Q8_0, 576, 256, mib=2, runs=2)
    large_bytes, large_s = _testing.stream_packed_gemv(Q8_0, 576, 256, mib=32, runs=2)
    # Copies of one 256 x 576 Q8_0 matrix (156,672 bytes) fill about the MiB asked for.
    assert small_bytes == 156672 * 13 and large_bytes == 156672 * 214
    assert 0 < small_s < large_s


def test_a_shape_without_a_packed_gemv_is_refused():
    with pytest.raises(RuntimeError, match="no packed GEMV for q4_K at 256 x 576"):
        _testing.stream_packed_gemv(Q4_K, 576, 256)   # a k-quant row must be a multiple of 256
    with pytest.raises(RuntimeError, match="cols 1"):
        _testing.stream_packed_gemv(Q8_0, 576, 256, cols=0)
    with pytest.raises(RuntimeError, match="not a weight type"):
        _testing.stream_packed_gemv(100000, 576, 256)
    with pytest.raises(RuntimeError, match="must be positive"):
        _testing.stream_packed_gemv(Q8_0, 0, 256)


def test_the_script_prints_a_share_and_a_cached_rate_per_type():
    out = subprocess.run([sys.executable, str(SCRIPTS_DIR / "stream_packed_gemv.py"), "q8_0", "q4_0", "--mib", "4",
                          "--rounds", "1"], env=child_env(), capture_output=True, text=True, timeout=120,
                         check=True).stdout
    rows = re.findall(r"^(q8_0|q4_0): streams ([0-9.]+) GB/s, share of the reference median \d+ % .*from L2 ([0-9.]+) GB/s$",
                      out, re.M)
    assert [r[0] for r in rows] == ["q8_0", "q4_0"] and all(float(r[1]) > 0 and float(r[2]) > 0 for r in rows), out


@pytest.mark.parametrize("args", [["q8_0", "--mib", "0"], ["q8_0", "--rounds", "0"], ["q9_9"], ["q4_k", "-k", "576"]])
def test_what_cannot_run_is_refused(args):
    run = subprocess.run([sys.executable, str(SCRIPTS_DIR / "stream_packed_gemv.py"), *args], env=child_env(),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and "stream_packed_gemv.py" in run.stderr and "Traceback" not in run.stderr, run.stderr
