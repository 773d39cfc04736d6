"""OUT paths that `edgeinfer quantize` and `edgeinfer convert` must refuse before any work
(edgeinfer.output_file), shared by both commands' tests.

Tests run as root, for whom permission bits do not stop a write: the unwritable folder is made by
putting OUT under a regular file."""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Callable

import pytest

from edgeinfer.errors import EdgeInferError
from support.cli import assert_clean_error

# (OUT relative to the test's folder, what the error says)
UNWRITABLE = [
    ("folder", "is a folder"),
    ("missing/out.gguf", "does not exist"),
    ("a-file/out.gguf", "is not a folder"),
]


def unwritable_output(tmp_path: Path, relative: str) -> Path:
    """OUT for an UNWRITABLE case, with the folder and the regular file the cases point into."""
    (tmp_path / "folder").mkdir(exist_ok=True)
    (tmp_path / "a-file").write_text("x")
    return tmp_path / relative


def assert_cli_refused(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    """The command line's refusal: a clean error naming the fragments (OUT, the reason), and never
    the temporary file it writes before renaming."""
    assert_clean_error(proc, *fragments)
    assert ".partial" not in proc.stderr


def assert_refused_before_any_work(tmp_path: Path, out: Path, message: str,
                                   start: Callable[[Callable[..., None]], None]) -> None:
    """start(never) runs the command towards `out` with `never` as its on_plan and on_tensor: it
    must raise EdgeInferError naming `out` and saying `message` before calling them, leaving the
    folder as it was (no temporary file either)."""
    before = sorted(tmp_path.rglob("*"))

    def never(*_):
        raise AssertionError("the work started")

    with pytest.raises(EdgeInferError, match=message) as exc:
        start(never)
    assert str(out) in str(exc.value) and ".partial" not in str(exc.value)
    assert sorted(tmp_path.rglob("*")) == before
