"""`edgeinfer bench` on the tiny random model: what it runs, its JSON and its arguments (no
timing assertions: speed is measured, not tested)."""
from __future__ import annotations

import json

import pytest

from edgeinfer.bench import make_token_ids, run_bench
from edgeinfer.cli import main
from edgeinfer.cli.args import build_parser
from support.cli import run_main
from support.tiny_llama import HD32


def test_runs_every_test_at_every_thread_count(tiny_llama_path):
    results = run_bench(tiny_llama_path, n_prompt=[8, 16], n_gen=[4], threads=[1, 2], repetitions=2)
    assert [(r.n_threads, r.test) for r in results] == [
        (1, "pp8"), (1, "pp16"), (1, "tg4"), (2, "pp8"), (2, "pp16"), (2, "tg4")]
    for r in results:
        assert len(r.samples_ns) == 2 and all(ns > 0 for ns in r.samples_ns)
        assert r.avg_ts > 0 and r.stddev_ts >= 0
        assert r.n_ctx == 16  # just enough for the longest test


def test_thread_counts_above_the_cpus_are_capped_with_a_note_and_run_once(tiny_llama_path, monkeypatch, capsys):
    import edgeinfer.threads
    monkeypatch.setattr(edgeinfer.threads.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert main(["bench", str(tiny_llama_path), "-p", "0", "-n", "2", "-t", "1000,1,0", "-r", "1", "--json"]) == 0
    out, err = capsys.readouterr()
    assert [r["n_threads"] for r in json.loads(out)] == [1]
    assert "note: 1000 threads requested, but this process can run on 1 logical CPU; using 1" in " ".join(err.split())


def test_zero_skips_a_kind_of_test(tiny_llama_path):
    results = run_bench(tiny_llama_path, n_prompt=[0], n_gen=[3], threads=[1], repetitions=1)
    assert [r.test for r in results] == ["tg3"]
    assert results[0].stddev_ts == 0.0


def test_refuses_a_context_shorter_than_a_test(tiny_llama_path):
    with pytest.raises(ValueError, match="smaller than the longest test"):
        run_bench(tiny_llama_path, n_prompt=[32], n_gen=[0], threads=[1], repetitions=1, n_ctx=16)
    with pytest.raises(ValueError, match="nothing to run"):
        run_bench(tiny_llama_path, n_prompt=[0], n_gen=[0], threads=[1], repetitions=1)


@pytest.mark.parametrize("sizes", [["-p", "300", "-n", "0"], ["-p", "0", "-n", "200", "-d", "100"],
                                   ["-p", str(10**12), "-n", "0"], ["-p", "8", "-n", "0", "-d", str(10**12)]])
def test_tests_longer_than_the_trained_context_are_refused_with_its_note_before_any_allocation(
        tiny_llama_path, capsys, sizes):
    """As -c is everywhere (the tiny llama is trained for 256 tokens), and before the token ids or
    the KV cache are allocated, so a huge size is an error at once, not a MemoryError."""
    proc = run_main(capsys, "bench", str(tiny_llama_path), "-t", "1", "-r", "1", *sizes)
    need = sum(int(v) for v in sizes[1::2])   # one test of each kind at most: depth + prompt or generation
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    note, error = proc.stderr.splitlines()
    assert note == f"note: n_ctx={need} exceeds the model's trained context of 256 tokens; using n_ctx=256"
    assert error == f"error: context size 256 is smaller than the longest test ({need} tokens)"


def test_a_larger_context_than_trained_is_clamped_with_the_note(tiny_llama_path, capsys):
    proc = run_main(capsys, "bench", str(tiny_llama_path), "-p", "8", "-n", "0", "-t", "1", "-r", "1", "-c", "1000",
                    "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["n_ctx"] == 256
    assert "note: n_ctx=1000 exceeds the model's trained context of 256 tokens; using n_ctx=256" in proc.stderr


def test_parallel_generation_tests_count_every_sequence_s_tokens(tiny_llama_path):
    results = run_bench(tiny_llama_path, n_prompt=[8], n_gen=[4], threads=[1], repetitions=1, n_parallel=[1, 3],
                        n_depth=[0, 5])
    assert [r.test for r in results] == ["pp8", "tg4", "tg4 x3", "pp8 @ d5", "tg4 @ d5", "tg4 x3 @ d5"]
    par = results[2]
    assert (par.n_parallel, par.n_tokens) == (3, 12) and par.to_dict()["n_parallel"] == 3
    with pytest.raises(ValueError, match="n_parallel values must be at least 1"):
        run_bench(tiny_llama_path, n_prompt=[8], n_gen=[4], threads=[1], repetitions=1, n_parallel=[0])


def test_token_ids_are_fixed_and_in_range():
    a, b = make_token_ids(100, 50), make_token_ids(100, 50)
    assert (a == b).all() and a.min() >= 0 and a.max() < 50 and str(a.dtype) == "int32"


def test_json_output_has_llama_bench_fields(tiny_llama_path, capsys):
    assert main(["bench", str(tiny_llama_path), "-p", "8", "-n", "4", "-t", "1,2", "-r", "2", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [(r["n_threads"], r["test"]) for r in records] == [(1, "pp8"), (1, "tg4"), (2, "pp8"), (2, "tg4")]
    for r in records:
        assert {"model", "model_size", "n_params", "isa", "n_prompt", "n_gen", "n_batch", "n_ctx",
                "samples_ns", "samples_ts", "avg_ts", "stddev_ts", "avg_ns"} <= set(r)
        assert len(r["samples_ts"]) == 2


def test_table_output_lists_each_test(tiny_llama_path, capsys):
    assert main(["bench", str(tiny_llama_path), "-p", "8", "-n", "4", "-t", "1", "-r", "1"]) == 0
    out = capsys.readouterr().out
    assert "pp8" in out and "tg4" in out and "±" in out


def test_argument_lists():
    args = build_parser().parse_args(["bench", "m.gguf", "-p", "128,512", "-n", "0", "-t", "1,2", "-r", "3",
                                      "-c", "1024", "-b", "256"])
    assert (args.n_prompt, args.n_gen, args.threads, args.repetitions, args.ctx_size, args.batch_size) == (
        [128, 512], [0], [1, 2], 3, 1024, 256)
    defaults = build_parser().parse_args(["bench", "m.gguf"])
    assert (defaults.n_prompt, defaults.n_gen, defaults.threads, defaults.repetitions) == ([512], [128], [0], 5)


@pytest.mark.parametrize("bad", [["-p", "x"], ["-p", "-1"], ["-t", "1,,a"], ["-r", "0"]])
def test_bad_arguments_are_rejected(bad):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "m.gguf", *bad])


def test_kv_cache_types_and_depth(tiny_llama_file):
    """--ctk/--ctv run every test for each K type x V type; -d starts each run from that many
    cached tokens (the context is sized for it)."""
    path, _ = tiny_llama_file(HD32)   # head_dim 32: quantizable
    results = run_bench(path, n_prompt=[8], n_gen=[4], threads=[1], repetitions=1, type_k=["f16", "q8_0"],
                        type_v=["q4_0"], n_depth=[0, 16])
    assert [(r.type_k, r.type_v, r.test) for r in results] == [
        ("f16", "q4_0", "pp8"), ("f16", "q4_0", "tg4"), ("f16", "q4_0", "pp8 @ d16"), ("f16", "q4_0", "tg4 @ d16"),
        ("q8_0", "q4_0", "pp8"), ("q8_0", "q4_0", "tg4"), ("q8_0", "q4_0", "pp8 @ d16"),
        ("q8_0", "q4_0", "tg4 @ d16")]
    assert all(r.n_ctx == 24 and r.samples_ns[0] > 0 for r in results)


def test_kv_types_in_the_table_and_json(tiny_llama_file, capsys):
    path, _ = tiny_llama_file(HD32)
    assert main(["bench", str(path), "-p", "0", "-n", "2", "-t", "1", "-r", "1", "-ctk", "q8_0,q4_0", "-ctv", "q8_0",
                 "-d", "8", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [(r["type_k"], r["type_v"], r["n_depth"], r["test"]) for r in records] == [
        ("q8_0", "q8_0", 8, "tg2 @ d8"), ("q4_0", "q8_0", 8, "tg2 @ d8")]
    assert main(["bench", str(path), "-p", "0", "-n", "2", "-t", "1", "-r", "1", "--ctk", "q8_0"]) == 0
    out = capsys.readouterr().out
    assert "type_k" in out and "q8_0" in out and "tg2" in out


def test_kv_type_lists_are_checked():
    args = build_parser().parse_args(["bench", "m.gguf", "-ctk", "f16,q8_0", "--ctv", "q4_0", "-d", "0,2048"])
    assert (args.cache_type_k, args.cache_type_v, args.n_depth) == (["f16", "q8_0"], ["q4_0"], [0, 2048])
    defaults = build_parser().parse_args(["bench", "m.gguf"])
    assert (defaults.cache_type_k, defaults.cache_type_v, defaults.n_depth) == (["f16"], ["f16"], [0])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "m.gguf", "-ctk", "q5_0"])
