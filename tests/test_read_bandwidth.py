"""scripts/read_bandwidth.py, the reference of "decode at N % of read bandwidth": the engine's own
threads read every line of a buffer once (edgeinfer._testing.read_seconds)."""
from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from edgeinfer import _testing
from support.cli import child_env
from support.paths import SCRIPTS_DIR


def test_a_pass_takes_time_in_proportion_to_the_bytes():
    small, large = np.ones(4 << 20, dtype=np.uint8), np.ones(64 << 20, dtype=np.uint8)
    t_small, t_large = _testing.read_seconds(small, 1, 3), _testing.read_seconds(large, 2, 3)
    # Whatever the host's speed, 16 times the bytes is not read in the time of the few (a loop the
    # compiler dropped would take none), nor is it instant.
    assert 0 < t_small < t_large


def test_a_buffer_at_any_alignment_is_read():
    buffer = np.ones((1 << 20) + 64, dtype=np.uint8)
    for offset in (0, 1, 31, 63):
        assert _testing.read_seconds(buffer[offset:], 1, 1) > 0
    assert _testing.read_seconds(buffer[:40], 1, 1) >= 0   # no whole line: nothing read, no fault


def test_the_script_prints_a_rate_per_thread_count():
    out = subprocess.run([sys.executable, str(SCRIPTS_DIR / "read_bandwidth.py"), "--mib", "32", "--threads", "1,2",
                          "--runs", "1"], env=child_env(), capture_output=True, text=True, timeout=60, check=True).stdout
    rates = re.findall(r"^(\d) thread\(s\): ([0-9.]+) GB/s$", out, re.M)
    assert [t for t, _ in rates] == ["1", "2"] and all(float(r) > 0 for _, r in rates), out


@pytest.mark.parametrize("args", [["--mib", "0"], ["--runs", "0"], ["--threads", "1,0"], ["--threads", "two"]])
def test_sizes_that_cannot_run_are_refused(args):
    run = subprocess.run([sys.executable, str(SCRIPTS_DIR / "read_bandwidth.py"), *args], env=child_env(),
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "error:" in run.stderr and "Traceback" not in run.stderr
