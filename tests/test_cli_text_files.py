"""Text files given to a command (-f, --system-file, --json-schema, ...) that are not UTF-8: one
error line naming the file and the byte, whichever command reads it (edgeinfer/cli/files.py)."""
from __future__ import annotations

import pytest

from support.cli import assert_clean_error, run_main


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
