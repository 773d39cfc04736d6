"""Pull GGUF models from the Hugging Face Hub by name, as ``llama.cpp -hf`` and ``ollama pull
hf.co/...`` do.

A name is ``hf.co/OWNER/REPO[@REVISION][:QUANT]`` (``huggingface.co/`` works too). The file is
chosen the way llama.cpp's ``common/download.cpp`` chooses it: among the repository's model GGUF
files (not ``mmproj``, ``imatrix`` or draft-head files), the first whose path contains the tag
followed by ``.`` or ``-``, case-insensitively; without a tag, Q4_K_M, then Q8_0, then the first
model file. Ollama's ``:latest`` means no tag.

huggingface_hub does the transfer, so its settings apply unchanged: the cache (``HF_HOME``,
``HF_HUB_CACHE``), the token (``HF_TOKEN`` or ``hf auth login``), the endpoint (``HF_ENDPOINT``)
and offline mode (``HF_HUB_OFFLINE=1``: the file is chosen among the cached ones, with no request).
A split model (``NAME-00001-of-0000N.gguf`` ...) is pulled as all its parts, into one snapshot
folder, where the core's loader finds them from the first part's path.

An LFS file (every real GGUF) is downloaded by `edgeinfer.hub_download`: into a partial file kept
between runs, so a pull that is killed or loses its connection resumes with a Range request on
the next run; the finished file is hashed, compared with the sha256 the Hub lists for it (its LFS
object id) and only then becomes huggingface_hub's blob; a mismatch deletes it. A cached file
whose marker is missing is hashed again. A verified file gets a marker in edgeinfer's cache folder, keyed by
that sha256, so later resolves skip the hash while the file is unchanged.
"""
from __future__ import annotations

import re
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx2  # huggingface_hub's HTTP client: an unreachable hub raises its transport errors
import tqdm
from huggingface_hub import HfApi, constants, hf_hub_download, try_to_load_from_cache
from huggingface_hub.errors import (
    GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled,
    RepositoryNotFoundError, RevisionNotFoundError,
)
from huggingface_hub.file_download import repo_folder_name

from edgeinfer.hub_download import ChangedOnHub, PartialMismatch, fetch_blob, partial_path
from edgeinfer.paths import cache_dir
from edgeinfer.pull import PullError, PullReporter, is_verified, mark_verified, sha256_file

HUB_PREFIXES = ("hf.co/", "huggingface.co/", "https://hf.co/", "https://huggingface.co/")
DEFAULT_TAGS = ("Q4_K_M", "Q8_0")  # llama.cpp's and Ollama's default, then llama.cpp's next
# Files beside the model that are not models themselves (llama.cpp's gguf_filename_is_model).
NOT_MODELS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")

NAME = re.compile(r"(?P<repo>[\w.-]+/[\w.-]+)(?:@(?P<revision>[^:@]+))?(?::(?P<tag>[\w.-]+))?")
SPLIT = re.compile(r"^(?P<prefix>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})$", re.IGNORECASE)
QUANT = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)
SHA256 = re.compile(r"[0-9a-f]{64}")


class HubError(PullError):
    """A model could not be found on, fetched from or verified against the Hugging Face Hub."""


class IncompleteSplit(HubError):
    """Some parts of a split model are missing from a listing."""


@dataclass(frozen=True)
class HubName:
    """A parsed ``hf.co/OWNER/REPO[@REVISION][:QUANT]``; tag None means the default choice."""

    repo_id: str
    tag: str | None = None
    revision: str | None = None

    def __str__(self) -> str:
        return ("hf.co/" + self.repo_id + (f"@{self.revision}" if self.revision else "")
                + (f":{self.tag}" if self.tag else ""))


@dataclass(frozen=True)
class HubFile:
    """One file of a repository: its path in the repo, size and sha256 (None if not LFS)."""

    path: str
    size: int | None
    sha256: str | None


def is_hub_name(text: str) -> bool:
    """True if ``text`` names a Hub model (starts with ``hf.co/`` or ``huggingface.co/``)."""
    return text.lower().startswith(HUB_PREFIXES)


def parse_hub_name(text: str) -> HubName:
    """Split ``hf.co/OWNER/REPO[@REVISION][:QUANT]`` into its parts (`HubError` if malformed)."""
    rest = next((text[len(p):] for p in HUB_PREFIXES if text.lower().startswith(p)), text)
    match = NAME.fullmatch(rest)
    if not match:
        raise HubError(f"not a Hugging Face model name: {text!r} "
                       "(expected hf.co/OWNER/REPO[:QUANT], e.g. hf.co/Qwen/Qwen3-0.6B-GGUF:Q8_0)")
    tag = match["tag"]
    return HubName(match["repo"], None if tag in (None, "latest") else tag, match["revision"])


# -- choosing the file ------------------------------------------------------------------------

def _stem(path: str) -> tuple[str, int, int]:
    """A GGUF path without ``.gguf`` and its split suffix, its part index and part count."""
    prefix = path[:-len(".gguf")] if path.lower().endswith(".gguf") else path
    match = SPLIT.match(prefix)
    if match:
        return match["prefix"], int(match["index"]), int(match["count"])
    return prefix, 1, 1


def quant_tag(path: str) -> str | None:
    """The quant tag a file name ends in (``Tiny-Q4_K_M.gguf`` -> ``Q4_K_M``), upper case."""
    match = QUANT.search(_stem(path)[0])
    return match[1].upper() if match else None


def is_model_file(path: str) -> bool:
    """A GGUF that is a model, not a projector, an importance matrix or a draft head."""
    name = path.rsplit("/", 1)[-1]
    return name.lower().endswith(".gguf") and not any(word in name for word in NOT_MODELS)


def choose_file(files: list[HubFile], tag: str | None, name: str) -> list[HubFile]:
    """The file ``tag`` picks among ``files``, as all its parts in order (one for a whole file).

    Raises `HubError` naming the repo's quant tags when none matches, or when it has no GGUF."""
    models = [f for f in files if is_model_file(f.path) and _stem(f.path)[1] == 1]
    if not models:
        raise HubError(f"{name}: the repository has no GGUF model file")
    chosen = None
    for t in ([tag] if tag else DEFAULT_TAGS):
        pattern = re.compile(re.escape(t) + "[.-]", re.IGNORECASE)
        chosen = next((f for f in models if pattern.search(f.path)), None)
        if chosen:
            break
    if chosen is None and tag is None:
        chosen = models[0]
    if chosen is None:
        tags = sorted({quant_tag(f.path) or f.path for f in models})
        raise HubError(f"{name}: no file for quant {tag!r}; available: {', '.join(tags)}")
    prefix, _, count = _stem(chosen.path)
    if count == 1:
        return [chosen]
    parts = sorted((f for f in files if _stem(f.path)[0] == prefix and _stem(f.path)[2] == count),
                   key=lambda f: _stem(f.path)[1])
    if len(parts) != count:
        raise IncompleteSplit(f"{name}: {chosen.path} is a split file of {count} parts, "
                       f"but the repository has {len(parts)} of them")
    return parts


# -- listing the repository -------------------------------------------------------------------

def _hub_listing(ref: HubName) -> tuple[list[HubFile], str]:
    """The repo's files with sizes and LFS sha256, and the commit they are at (one request)."""
    info = HfApi().model_info(ref.repo_id, revision=ref.revision, files_metadata=True)
    files = [HubFile(s.rfilename, s.size, s.lfs.sha256 if s.lfs else None)
             for s in info.siblings or []]
    return files, info.sha or ref.revision or "main"


def _cached_listing(ref: HubName) -> tuple[list[HubFile], str] | None:
    """The repo's GGUF files in huggingface_hub's cache at the revision, or None if none are.

    A cached blob is named by the file's ETag, which for an LFS file is its sha256."""
    repo = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=ref.repo_id, repo_type="model")
    revision = ref.revision or "main"
    if not re.fullmatch(r"[0-9a-f]{40}", revision):
        try:
            revision = (repo / "refs" / revision).read_text().strip()
        except OSError:
            return None
    snapshot = repo / "snapshots" / revision
    files = []
    for path in sorted(snapshot.rglob("*.gguf")):
        blob = path.resolve().name
        files.append(HubFile(path.relative_to(snapshot).as_posix(), path.stat().st_size,
                             blob if SHA256.fullmatch(blob) else None))
    return (files, revision) if files else None


def _describe_hub_error(exc: Exception, ref: HubName) -> str:
    """One line a user can act on, for what huggingface_hub raised."""
    login = "log in with `hf auth login` or set HF_TOKEN"
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, GatedRepoError):
        return (f"{ref.repo_id} is gated: accept its conditions on "
                f"https://huggingface.co/{ref.repo_id} and {login}")
    if isinstance(exc, RepositoryNotFoundError):
        return (f"{ref.repo_id}: no such repository on the Hugging Face Hub (HTTP {status}); "
                f"if it is private, {login}")
    if isinstance(exc, RevisionNotFoundError):
        return f"{ref.repo_id}: no revision {ref.revision!r}"
    if isinstance(exc, HfHubHTTPError) and status in (401, 403):
        return f"{ref.repo_id}: access denied (HTTP {status}); {login}"
    if isinstance(exc, HfHubHTTPError):
        return f"{ref.repo_id}: the Hugging Face Hub answered HTTP {status}"
    return (f"cannot reach the Hugging Face Hub at {constants.ENDPOINT} ({type(exc).__name__}: "
            f"{exc}); with HF_HUB_OFFLINE=1, cached models are used without a connection")


# -- fetching and verifying -------------------------------------------------------------------

def _progress_bar(reporter: PullReporter, label: str) -> type[tqdm.tqdm]:
    """A tqdm class huggingface_hub can draw its download progress with, shown by `reporter`
    under ``label`` (huggingface_hub's own description is the URL)."""

    class ReporterBar(tqdm.tqdm):
        def __init__(self, *args, **kwargs) -> None:
            kwargs.pop("name", None)
            super().__init__(*args, **{**kwargs, "disable": True})
            self._stack = ExitStack()
            total, initial = kwargs.get("total") or 0, kwargs.get("initial") or 0
            self._advance = self._stack.enter_context(reporter.transfer(label, total))
            if initial:
                self._advance(initial)  # the bytes a resumed download already has

        def update(self, n: float | None = 1) -> bool | None:
            self._advance(int(n or 0))
            return super().update(n)

        def close(self) -> None:
            if hasattr(self, "_stack"):
                self._stack.close()
            super().close()

    return ReporterBar


def _marker(sha256: str) -> Path:
    """The verified-file marker of a Hub file, beside edgeinfer's other rebuildable files (not in
    huggingface_hub's cache, whose folders it manages)."""
    return cache_dir() / "hub-verified" / f"{sha256}.json"


def _verify(path: Path, file: HubFile, name: str, reporter: PullReporter) -> None:
    """Check ``path`` against the Hub's sha256 (or size); delete it if it does not match."""
    size = path.stat().st_size
    if file.sha256 is None:  # not an LFS file: the Hub lists no sha256, only the size
        if file.size is not None and size != file.size:
            _discard(path)
            raise HubError(f"{name}: {file.path} has {size} bytes, the Hub lists {file.size}; "
                           "the file was deleted, pull again")
        return
    if is_verified(path, file.sha256, _marker(file.sha256)):
        return
    digest = _hash(path, Path(file.path).name, reporter)
    if digest != file.sha256:
        _discard(path)
        raise HubError(f"{name}: {file.path} does not match the Hub's sha256 (got {digest}, "
                       f"expected {file.sha256}); the file was deleted, pull again")
    mark_verified(path, file.sha256, _marker(file.sha256))


def _discard(path: Path) -> None:
    """Remove a cached file: the blob and the snapshot's link to it."""
    blob = path.resolve()
    path.unlink(missing_ok=True)
    blob.unlink(missing_ok=True)


def pull_hub_model(name: str, *, reporter: PullReporter | None = None,
                   force: bool = False) -> Path:
    """Make sure the Hub model ``name`` (``hf.co/OWNER/REPO[:QUANT]``) is in huggingface_hub's
    cache, verified, and return the path of its file. Raises `HubError` with one line to show."""
    ref = parse_hub_name(name)
    reporter = reporter or PullReporter()
    offline = constants.is_offline_mode()
    listing = None
    if not offline:
        try:
            listing = _hub_listing(ref)
        except (httpx2.TransportError, OfflineModeIsEnabled) as exc:
            listing = _cached_listing(ref)  # as llama.cpp: an unreachable hub falls back to the cache
            if listing is None:
                raise HubError(_describe_hub_error(exc, ref)) from None
            offline = True
            reporter.message(f"the Hugging Face Hub is unreachable; using the cached {ref}")
        except HfHubHTTPError as exc:
            raise HubError(_describe_hub_error(exc, ref)) from None
    else:
        listing = _cached_listing(ref)
        if listing is None:
            raise HubError(f"{ref} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) "
                           "and HF_HUB_OFFLINE is set; pull it with a connection first")
    files, commit = listing
    # Online, the download names the revision, not the listing's commit: huggingface_hub then
    # records which commit the branch is at (refs/main), which offline lookups read.
    revision = commit if offline else (ref.revision or "main")
    parts = choose_file(files, ref.tag, str(ref))
    # A split model's parts all land in the snapshot folder under their names, where the core's
    # loader finds them from the first part's path.
    cached = all(isinstance(try_to_load_from_cache(ref.repo_id, f.path, revision=commit), str)
                 for f in parts)
    paths = [_fetch(ref, f, revision, offline=offline, force=force, reporter=reporter)
             for f in parts]
    done = "already present" if cached and not force else "pulled"
    shown = parts[0].path + (f" and {len(parts) - 1} more parts" if len(parts) > 1 else "")
    reporter.message(f"{ref} {done}: {shown} ({paths[0]})")
    return paths[0]


def _fetch(ref: HubName, file: HubFile, revision: str, *, offline: bool, force: bool,
           reporter: PullReporter) -> Path:
    """One file in huggingface_hub's cache, verified: its snapshot path.

    Online, an LFS file is downloaded by `fetch_blob` (resumable across runs, hashed as it is
    finished); huggingface_hub then only links the blob into the snapshot and records the ref."""
    name, label = str(ref), Path(file.path).name
    fetched = False
    try:
        if file.sha256 is not None and not offline:
            fetched = fetch_blob(ref.repo_id, file.path, revision, file.sha256,
                                 tqdm_class=_progress_bar(reporter, f"downloading {file.path}"),
                                 hash_file=lambda p: _hash(p, label, reporter), force=force)
            force_download = False
        else:
            force_download = force
        path = Path(hf_hub_download(ref.repo_id, file.path, revision=revision,
                                    force_download=force_download, local_files_only=offline,
                                    tqdm_class=_progress_bar(reporter, f"downloading {file.path}")))
    except LocalEntryNotFoundError:
        raise HubError(f"{name}: {file.path} is not in the Hugging Face cache and the Hub cannot "
                       "be reached") from None
    except PartialMismatch as exc:
        raise HubError(f"{name}: {file.path} does not match the Hub's sha256 (got {exc.digest}, "
                       f"expected {file.sha256}); the file was deleted, pull again") from None
    except ChangedOnHub as exc:
        raise HubError(f"{name}: {file.path} changed on the Hub while pulling (its ETag is now "
                       f"{exc.etag}, the listing said {file.sha256}); pull again") from None
    except (HfHubHTTPError, OfflineModeIsEnabled) as exc:
        raise HubError(_describe_hub_error(exc, ref)) from None
    except (httpx2.TransportError, OSError) as exc:  # OSError: the body ended short
        kept = partial_path(ref.repo_id, file.sha256) if file.sha256 else None
        have = kept.stat().st_size if kept is not None and kept.exists() else 0
        resume = f"; {have} bytes are kept and the next pull resumes from them" if have else ""
        raise HubError(f"{name}: the connection to the Hugging Face Hub was lost while "
                       f"downloading {file.path} ({type(exc).__name__}: "
                       f"{str(exc).splitlines()[0] if str(exc) else ''}){resume}") from None
    if fetched:
        mark_verified(path, file.sha256, _marker(file.sha256))  # hashed before it became the blob
    else:
        _verify(path, file, name, reporter)
    return path


def _hash(path: Path, label: str, reporter: PullReporter) -> str:
    """The sha256 of a downloaded file, shown as a transfer."""
    with reporter.transfer(f"verifying {label}", path.stat().st_size) as advance:
        return sha256_file(path, advance)


def cached_hub_model(name: str) -> Path | None:
    """The cached file ``name`` picks, without a request, or None if it is not cached."""
    ref = parse_hub_name(name)
    listing = _cached_listing(ref)
    if listing is None:
        return None
    files, commit = listing
    try:
        parts = choose_file(files, ref.tag, str(ref))
    except IncompleteSplit:
        return None  # a part is not cached (yet)
    cached = [try_to_load_from_cache(ref.repo_id, f.path, revision=commit) for f in parts]
    return Path(cached[0]) if all(isinstance(c, str) for c in cached) else None
