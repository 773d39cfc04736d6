"""scripts/bench_compare.py's summary: the paired ratio (median of per-round ratios)."""
from __future__ import annotations

from support.paths import load_script


def test_paired_ratio_cancels_a_slow_phase_that_the_ratio_of_medians_does_not():
    bench = load_script("bench_compare")
    # Three rounds of tg100 (ns per run); in every round edgeinfer is 1.25x faster. llama.cpp's
    # runs of rounds 1 and 3 and edgeinfer's of round 3 hit a slow phase of the host (2x).
    cell = bench.Cell("m.gguf", "tg100", 1, edgeinfer_ns=[800, 800, 1600], llamacpp_ns=[2000, 1000, 2000])
    s = cell.summary()
    assert abs(s["ratio_paired"] - 1.25) < 1e-12   # rounds: 2.5, 1.25, 1.25
    assert abs(s["ratio_median"] - 2.5) < 1e-12    # 800 ns against 2000 ns, from different phases
    assert "| **2.50** | 1.25 |" in bench.markdown([cell])


def test_paired_ratio_is_the_ratio_when_every_round_agrees():
    bench = load_script("bench_compare")
    cell = bench.Cell("m.gguf", "pp512", 2, edgeinfer_ns=[800, 1600, 800], llamacpp_ns=[1000, 2000, 1000])
    s = cell.summary()
    assert abs(s["ratio_paired"] - 1.25) < 1e-12 and abs(s["ratio_median"] - 1.25) < 1e-12
