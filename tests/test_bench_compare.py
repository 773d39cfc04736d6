"""scripts/bench_compare.py's summary: the paired ratio (median of per-round ratios)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "bench_compare.py"


def load_script():
    spec = importlib.util.spec_from_file_location("bench_compare", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_paired_ratio_cancels_a_slow_phase_that_the_ratio_of_medians_does_not():
    bench = load_script()
    # Three rounds of tg100 (ns per run); in every round edgeinfer is 1.25x faster. llama.cpp's
    # runs of rounds 1 and 3 and edgeinfer's of round 3 hit a slow phase of the host (2x).
    cell = bench.Cell("m.gguf", "tg100", 1, edgeinfer_ns=[800, 800, 1600], llamacpp_ns=[2000, 1000, 2000])
    s = cell.summary()
    assert abs(s["ratio_paired"] - 1.25) < 1e-12   # rounds: 2.5, 1.25, 1.25
    assert abs(s["ratio_median"] - 2.5) < 1e-12    # 800 ns against 2000 ns, from different phases
    assert "| **2.50** | 1.25 |" in bench.markdown([cell])


def test_paired_ratio_is_the_ratio_when_every_round_agrees():
    bench = load_script()
    cell = bench.Cell("m.gguf", "pp512", 2, edgeinfer_ns=[800, 1600, 800], llamacpp_ns=[1000, 2000, 1000])
    s = cell.summary()
    assert abs(s["ratio_paired"] - 1.25) < 1e-12 and abs(s["ratio_median"] - 1.25) < 1e-12
