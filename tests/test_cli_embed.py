"""`edgeinfer embed` on the tiny random llama (a generative model: its file names no pooling): a
model without pooling is refused in one line, and each vector's index is its line in -f FILE."""
from __future__ import annotations

import json

import numpy as np
import pytest

from edgeinfer.model import Model
from support.cli import assert_clean_error, run_main


def test_a_model_without_pooling_is_refused_with_the_flags_that_pool(tiny_llama_path, capsys):
    for extra in ([], ["--pooling", "none"]):
        proc = run_main(capsys, "embed", str(tiny_llama_path), "hello", "-c", "32", "-t", "1", *extra)
        assert_clean_error(proc, "gives a vector per token rather than one per text",
                           "give --pooling mean, last or cls")
        assert len(proc.stderr.splitlines()) == 1
    assert "its file names none" in run_main(capsys, "embed", str(tiny_llama_path), "hi", "-c", "32").stderr


def test_the_index_of_a_line_of_the_file_is_its_line_number(tiny_llama_path, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("the first line\n\n   \nthe fourth line\n", encoding="utf-8")
    proc = run_main(capsys, "embed", str(tiny_llama_path), "-f", str(texts), "--pooling", "mean", "-c", "32",
                    "-t", "1")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [line["index"] for line in lines] == [0, 3]   # blank lines are skipped, not renumbered
    model = Model.load(tiny_llama_path, n_ctx=32, n_threads=1, embeddings=True, pooling="mean")
    np.testing.assert_allclose([line["embedding"] for line in lines],
                               model.embed(["the first line", "the fourth line"]), rtol=1e-6)


def test_texts_may_follow_the_options(tiny_llama_path, capsys):
    before = run_main(capsys, "embed", str(tiny_llama_path), "a text", "another", "--pooling", "mean", "-c", "32")
    after = run_main(capsys, "embed", str(tiny_llama_path), "--pooling", "mean", "-c", "32", "a text", "another")
    assert before.returncode == after.returncode == 0 and before.stdout == after.stdout
    assert len(after.stdout.splitlines()) == 2
    with pytest.raises(SystemExit) as exit_status:   # an unknown option is still argparse's error
        run_main(capsys, "embed", str(tiny_llama_path), "--pooling", "mean", "text", "--bogus")
    err = capsys.readouterr().err
    assert exit_status.value.code == 2 and "unrecognized arguments:" in err and "--bogus" in err
