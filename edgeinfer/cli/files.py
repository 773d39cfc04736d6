"""The files a command is given by name: texts it reads (a prompt, a corpus, a schema) and files it
writes after a long run (a KL-divergence base, an importance matrix). Errors name the file as the
user typed it."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from edgeinfer.output_file import PartialFile, check_output_path

STDIN = "-"


def read_text_file(path: str) -> str:
    """The text of `path` ('-': stdin), which must be UTF-8: anything else is a ValueError naming
    the file and the first byte that is not (codecs' own message names neither)."""
    try:
        if path == STDIN:
            return sys.stdin.read()
        return Path(path).expanduser().read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        byte = f"byte 0x{exc.object[exc.start]:02x}"
        # stdin is decoded a buffer at a time: an offset would be within the buffer, not the input
        where = "standard input" if path == STDIN else path
        at = "" if path == STDIN else f" at offset {exc.start}"
        raise ValueError(f"{where} is not UTF-8 text ({byte}{at} is not valid UTF-8); convert it to UTF-8 "
                         "first (e.g. with iconv)") from None


def check_writable_output(out: str, inputs: list[str | os.PathLike], force: bool) -> None:
    """Refuses, before any work, an output path that cannot be written: edgeinfer.output_file's
    checks, then creating (and removing) the temporary file the output is written through, since
    permission bits do not show everything (a read-only mount, or /proc to root)."""
    check_output_path(out, inputs=[p for p in inputs if os.fspath(p) != STDIN], force=force)
    partial = PartialFile(out)
    with partial.errors():
        partial.tmp_path.open("wb").close()
    partial.discard()
