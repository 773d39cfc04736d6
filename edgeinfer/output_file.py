"""The file `edgeinfer quantize` and `edgeinfer convert` write, OUT.

OUT is checked before any work, so a path that cannot be written fails in a moment, not after
minutes of converting. The data goes to a hidden temporary file beside OUT that becomes OUT only
when complete (a rename, so OUT never holds half a model); errors about it name OUT as the user
gave it, since the temporary file is an implementation detail they never asked for."""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from edgeinfer.errors import EdgeInferError
from edgeinfer.wording import Ref, Wording


def _same_file(a: Path, b: Path) -> bool:
    return a.exists() and b.exists() and os.path.samefile(a, b)


def check_output_path(out: str | os.PathLike, inputs: Iterable[str | os.PathLike] = (),
                      force: bool = False) -> None:
    """Raises EdgeInferError, naming `out`, unless a new file can be written there: `out` must not
    be one of `inputs` (a file, or a folder that is read), nor a folder or another non-regular
    file, nor an existing file unless `force`; its folder must exist and be writable."""
    out = Path(out)
    for src in inputs:
        if _same_file(out, Path(src)):
            raise EdgeInferError(f"{out} is the input; write the output to another path")
    if out.is_dir():
        raise EdgeInferError(f"{out} is a folder; give the path of the file to write")
    if out.exists():
        if not out.is_file():
            raise EdgeInferError(f"{out} exists and is not a regular file; write the output to another path")
        if not force:
            raise EdgeInferError(Wording(f"{out} already exists; pass ", Ref("force", True), " to overwrite it"))
    folder = out.parent
    if not folder.exists():
        raise EdgeInferError(f"cannot write {out}: the folder {folder} does not exist")
    if not folder.is_dir():
        raise EdgeInferError(f"cannot write {out}: {folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise EdgeInferError(f"cannot write {out}: no permission to create files in {folder}")


class PartialFile:
    """The temporary file `tmp_path` beside `path` that `publish()` renames to `path`."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.tmp_path = self.path.with_name(f".{self.path.name}.{os.getpid()}.partial")

    @contextmanager
    def errors(self) -> Iterator[None]:
        """Re-raises an OSError from inside (opening, writing, renaming) as EdgeInferError naming
        `path` rather than the temporary file."""
        try:
            yield
        except OSError as exc:
            raise EdgeInferError(f"cannot write {self.path}: {exc.strerror or exc}") from exc

    def publish(self) -> None:
        with self.errors():
            os.replace(self.tmp_path, self.path)

    def discard(self) -> None:
        try:
            os.unlink(self.tmp_path)
        except FileNotFoundError:
            pass
