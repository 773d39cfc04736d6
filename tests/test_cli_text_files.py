"""Text files given to a command (-f, --system-file, --json-schema, ...) that are not UTF-8: one
error line naming the file and the byte, whichever command reads it (edgeinfer/cli/files.py)."""
from __future__ import annotations

import io
import os
import re
import sys

import pytest

from support.cli import assert_clean_error, run_cli, run_main


@pytest.mark.parametrize("command", [
    ["run", "-c", "32", "-f"],                          # read once the model is loaded
    ["run", "-c", "32", "-p", "hi", "--json-schema"],
    ["chat", "-c", "32", "--system-file"],              # read before it is
    ["perplexity", "-c", "32", "-f"],
    ["embed", "-c", "32", "-f"],
    ["rerank", "query", "-c", "32", "-f"],
])
def test_a_file_that_is_not_utf8_is_named_in_the_error(command, tiny_llama_path, tmp_path, capsys):
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\u00e9 cr\u00e8me".encode("latin-1"))
    name, *options = command
    proc = run_main(capsys, name, str(tiny_llama_path), "-t", "1", *options, str(latin1))
    assert_clean_error(proc, f"{latin1} is not UTF-8 text (byte 0xe9 at offset 3")


def piped_stdin(monkeypatch, data: bytes) -> None:
    """sys.stdin as a pipe of `data`, decoded as Python decodes a pipe in a C or C.UTF-8 locale
    (surrogateescape: a byte that is not UTF-8 becomes a lone surrogate, not an error)."""
    pipe = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="surrogateescape")
    monkeypatch.setattr(sys, "stdin", pipe)


def test_standard_input_that_is_not_utf8_is_named_in_the_error(tiny_llama_path, monkeypatch, capsys):
    piped_stdin(monkeypatch, "caf\u00e9".encode("latin-1"))
    proc = run_main(capsys, "run", str(tiny_llama_path), "-t", "1", "-c", "32", "-f", "-")
    assert_clean_error(proc, "standard input is not UTF-8 text (byte 0xe9 at offset 3")
    assert "surrogate" not in proc.stderr


def test_chat_names_a_piped_line_that_is_not_utf8_and_goes_on_with_the_next(tiny_llama_path, monkeypatch, capsys):
    piped_stdin(monkeypatch, b"hello\ncaf\xe9\n/set temp 0.5\n/show\n")
    proc = run_main(capsys, "chat", str(tiny_llama_path), "-t", "1", "-c", "64", "-n", "2", "--temp", "0")
    assert proc.returncode == 1 and "surrogate" not in proc.stderr
    assert "error: line 2 of standard input is not UTF-8 text (byte 0xe9 at offset 3" in proc.stderr
    shown = proc.stderr.split("temp = 0.5", 1)[1]   # the lines after it were read
    assert re.search(r"messages +2\n", shown)      # hello and its answer; the bad line is not a message
    piped_stdin(monkeypatch, b"caf\xe9\n")
    proc = run_main(capsys, "chat", str(tiny_llama_path), "-t", "1", "-c", "64", "--single")
    assert proc.returncode == 1 and proc.stdout == ""
    assert "error: standard input is not UTF-8 text (byte 0xe9 at offset 3" in proc.stderr


@pytest.mark.parametrize("command", [
    ["run", "-c", "32", "-p"],
    ["run", "-c", "32", "-p", "hi", "--stop"],
    ["chat", "-c", "32", "--single", "-s"],
    ["embed", "-c", "32", "--pooling", "mean"],        # a text after the options
    ["rerank", "-c", "32"],                            # the query
])
def test_a_text_argument_that_is_not_utf8_is_named_in_the_error(command, tiny_llama_path):
    name, *options = command
    latin1 = os.fsdecode("caf\u00e9".encode("latin-1"))   # as Python decodes such a command line
    proc = run_cli(name, str(tiny_llama_path), *options, latin1, timeout=120)
    assert proc.returncode == 2 and "surrogate" not in proc.stderr, proc.stderr
    assert "the text is not UTF-8 text (byte 0xe9 at offset 3" in proc.stderr.splitlines()[-1]
