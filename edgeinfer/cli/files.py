"""The files a command is given by name: texts it reads (a prompt, a corpus, a schema) and files it
writes after a long run (a KL-divergence base, an importance matrix). Errors name the file as the
user typed it."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from edgeinfer.output_file import PartialFile, check_output_path
from edgeinfer.text_check import not_utf8

STDIN = "-"


def read_text_file(path: str) -> str:
    """The text of `path` ('-': stdin), which must be UTF-8: anything else is a ValueError naming
    the file and the first byte that is not (text_check.not_utf8)."""
    try:
        if path == STDIN:   # its bytes: sys.stdin may decode bad ones to lone surrogates
            return sys.stdin.buffer.read().decode("utf-8")
        return Path(path).expanduser().read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8("standard input" if path == STDIN else path, exc) from None


def check_writable_output(out: str, inputs: list[str | os.PathLike], force: bool) -> None:
    """Refuses, before any work, an output path that cannot be written: edgeinfer.output_file's
    checks, then creating (and removing) the temporary file the output is written through, since
    permission bits do not show everything (a read-only mount, or /proc to root)."""
    check_output_path(out, inputs=[p for p in inputs if os.fspath(p) != STDIN], force=force)
    partial = PartialFile(out)
    with partial.errors():
        partial.tmp_path.open("wb").close()
    partial.discard()
