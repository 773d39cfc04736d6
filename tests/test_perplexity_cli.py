"""`edgeinfer perplexity`: the CLI over edgeinfer.perplexity (running estimate, final PPL ± stderr,
JSON), and the KL divergence against a saved base (edgeinfer.kld) on the tiny random model."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from edgeinfer.errors import EdgeInferError
from edgeinfer.kld import BaseRecorder, Comparer
from edgeinfer.model import Model
from edgeinfer.perplexity import perplexity
from edgeinfer.quantize import QuantizeOptions, quantize_file
from support.cli import assert_clean_error, run_cli
from support.tiny_llama import KQUANTIZABLE

TEXT = ("The quick brown fox jumps over the lazy dog. " * 3 + "Pack my box with five dozen liquor jugs. ") * 6


@pytest.fixture(scope="module")
def tiny(tiny_llama_file) -> Path:
    return tiny_llama_file(KQUANTIZABLE)[0]


@pytest.fixture(scope="module")
def text_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("text") / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def perplexity_cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli("perplexity", *args, timeout=120)


def test_cli_prints_running_and_final_estimate_matching_the_library(tiny, text_file):
    proc = perplexity_cli(str(tiny), "-f", str(text_file), "-c", "64", "-t", "2")
    assert proc.returncode == 0, proc.stderr
    expected = perplexity(Model.load(tiny, n_ctx=64, n_threads=2), TEXT, n_ctx=64)
    assert expected.n_chunks >= 3
    assert proc.stderr.strip().startswith("[1]") and f"[{expected.n_chunks}]" in proc.stderr
    assert f"PPL = {expected.ppl:.4f} +/- {expected.stderr:.5f}" in proc.stdout
    js = json.loads(perplexity_cli(str(tiny), "-f", str(text_file), "-c", "64", "--chunks", "2", "--json").stdout)
    assert js["n_chunks"] == 2 and js["n_scored"] == 2 * 31
    small_batches = json.loads(perplexity_cli(str(tiny), "-f", str(text_file), "-c", "64", "-b", "16", "--chunks",
                                              "2", "--json").stdout)
    assert abs(small_batches["ppl"] / js["ppl"] - 1) < 1e-4


def test_kl_divergence_of_a_model_from_itself_is_zero_and_grows_with_quantization(tiny, text_file, tmp_path):
    base = tmp_path / "base.kld"
    assert perplexity_cli(str(tiny), "-f", str(text_file), "-c", "64", "--kl-divergence-base", str(base)).returncode == 0
    same = json.loads(perplexity_cli(str(tiny), "-f", str(text_file), "-c", "64", "--kl-divergence-base", str(base),
                                     "--kl-divergence", "--json").stdout)   # llama-perplexity's spelling
    assert same["kld"]["mean_kld"] < 1e-9 and same["kld"]["same_top_pct"] == 100.0
    q4 = tmp_path / "q4.gguf"
    quantize_file(tiny, q4, QuantizeOptions("Q4_0"))
    proc = perplexity_cli(str(q4), "-f", str(text_file), "-c", "64", "--kl-divergence", "--kl-file", str(base))
    assert proc.returncode == 0, proc.stderr
    assert "Mean KLD" in proc.stdout and "99.0% KLD" in proc.stdout and "Same top token" in proc.stdout
    other = perplexity_cli(str(q4), "-f", str(text_file), "-c", "32", "--kl-divergence", "--kl-file", str(base))
    assert_clean_error(other, "do not match")


def test_stored_top_k_gives_a_lower_bound_exact_when_k_covers_the_vocabulary(tiny, tmp_path):
    rows = {}
    for name, path in (("base", tiny), ("q", tmp_path / "q.gguf")):
        if name == "q":
            quantize_file(tiny, path, QuantizeOptions("Q2_K"))
        collected = []
        perplexity(Model.load(path, n_ctx=64), TEXT, n_ctx=64,
                   on_scored=lambda i, l, t, c=collected: c.append((l.copy(), t.copy())))
        rows[name] = collected

    def log_softmax(x):
        x = x.astype(np.float64)
        m = x.max(axis=1, keepdims=True)
        return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))

    p = np.concatenate([log_softmax(l) for l, _ in rows["base"]])
    q = np.concatenate([log_softmax(l) for l, _ in rows["q"]])
    exact = (np.exp(p) * (p - q)).sum(axis=1)
    means = []
    for k in (8, 64, p.shape[1]):
        rec = BaseRecorder(k)
        for i, (l, t) in enumerate(rows["base"]):
            rec(i, l, t)
        rec.save(tmp_path / f"k{k}.kld", {"ppl": 1.0})
        cmp = Comparer(tmp_path / f"k{k}.kld")
        for i, (l, t) in enumerate(rows["q"]):
            cmp(i, l, t)
        got = cmp.result().klds
        assert np.all(got <= exact + 1e-9)          # a lower bound, token by token
        means.append(got.mean())
    np.testing.assert_allclose(got, exact, rtol=1e-6, atol=1e-10)  # the whole vocabulary: exact
    assert means[0] <= means[1] <= means[2]         # tighter as K grows


def test_a_file_that_is_not_a_base_is_refused(tmp_path):
    bad = tmp_path / "bad.kld"
    bad.write_bytes(b"not numpy")
    with pytest.raises(EdgeInferError, match="not a KL-divergence base file"):
        Comparer(bad)


@pytest.mark.parametrize("bad", [b"", b"not numpy", b"PK\x03\x04 not a zip"])
def test_the_reason_a_base_file_is_refused_is_ours_not_numpys(tmp_path, bad):
    path = tmp_path / "bad.kld"
    path.write_bytes(bad)
    with pytest.raises(EdgeInferError) as refused:
        Comparer(path)
    assert str(refused.value) == (f"{path}: not a KL-divergence base file (those are written by perplexity "
                                  "--kl-divergence-base FILE)")


@pytest.mark.parametrize("n_ctx", ["1", "2"])
def test_a_chunk_too_small_to_score_a_token_is_refused_before_any_work(tiny, text_file, tmp_path, n_ctx):
    proc = perplexity_cli(str(tiny), "-f", str(text_file), "-c", n_ctx)
    assert_clean_error(proc, f"a chunk of {n_ctx} token", "scores none", "use at least -c 3")
    # before the model is even looked for
    assert_clean_error(perplexity_cli(str(tmp_path / "absent.gguf"), "-f", str(text_file), "-c", n_ctx), "scores none")
    with pytest.raises(EdgeInferError, match="use at least n_ctx=3"):
        perplexity(Model.load(tiny, n_ctx=64), TEXT, n_ctx=int(n_ctx))
    smallest = json.loads(perplexity_cli(str(tiny), "-f", str(text_file), "-c", "3", "--chunks", "1", "--json").stdout)
    assert smallest["n_scored"] == 1


def test_an_unwritable_base_file_is_refused_before_the_text_is_scored(tiny, text_file, tmp_path):
    for unwritable in ("/proc/x.kld", str(tmp_path / "missing" / "x.kld")):
        proc = perplexity_cli(str(tiny), "-f", str(text_file), "-c", "64", "--kl-divergence-base", unwritable)
        assert_clean_error(proc, f"cannot write {unwritable}")
        assert "[1]" not in proc.stderr and ".partial" not in proc.stderr
