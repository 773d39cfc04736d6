"""scripts/ab_builds.py: two builds' decode bursts in turn, summarized as the median paired ratio."""
from __future__ import annotations

import re
import subprocess
import sys

from support.cli import IMPORT_ROOT, child_env
from support.paths import SCRIPTS_DIR


def run_ab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPTS_DIR / "ab_builds.py"), *args], env=child_env(),
                          capture_output=True, text=True, timeout=300)


def test_one_build_against_itself_reports_every_pair(tiny_llama_path):
    run = run_ab(str(IMPORT_ROOT), str(IMPORT_ROOT), str(tiny_llama_path), "-t", "1", "--rounds", "3", "-n", "4",
                 "-d", "8", "--kv", "f16", "--base-env", "EDGEINFER_ISA=scalar")
    assert run.returncode == 0, run.stderr
    m = re.fullmatch(r"tok/s median: base ([\d.]+), new ([\d.]+); paired ratio new/base ([\d.]+) "
                     r"\(3 pairs of 4 steps, depth 8, 1 threads, KV f16\)", run.stdout.strip())
    assert m, run.stdout
    base, new, ratio = map(float, m.groups())
    assert base > 0 and new > 0 and ratio > 0


def test_a_kv_type_the_model_cannot_take_is_a_one_line_error(tiny_llama_path):
    # The tiny llama's head_dim is not a multiple of 32, which the quantized caches need.
    run = run_ab(str(IMPORT_ROOT), str(IMPORT_ROOT), str(tiny_llama_path), "--rounds", "1", "--kv", "q8_0")
    assert run.returncode != 0
    assert "head_dim" in run.stderr and "Traceback" not in run.stderr


def test_a_folder_without_a_build_is_named(tmp_path, tiny_llama_path):
    run = run_ab(str(tmp_path), str(IMPORT_ROOT), str(tiny_llama_path), "--rounds", "1", "-n", "2")
    assert run.returncode != 0
    assert f"the build in {tmp_path} did not start" in run.stderr


def test_arguments_that_cannot_run_are_refused_before_any_build_starts(tiny_llama_path):
    for bad in (["--rounds", "0"], ["-n", "-1"], ["--base-env", "EDGEINFER_ISA"]):
        run = run_ab(str(IMPORT_ROOT), str(IMPORT_ROOT), str(tiny_llama_path), *bad)
        assert run.returncode == 2 and "Traceback" not in run.stderr, (bad, run.stderr)
