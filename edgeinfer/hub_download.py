"""A Hub file fetched into huggingface_hub's cache so that a killed pull resumes, as Ollama's and
llama.cpp's do.

huggingface_hub downloads into a temporary file unique to the process and deletes it on failure,
so its own retry resumes only within one run. Here the bytes go to a partial file under a
name the next run finds again, ``blobs/<sha256>.edgeinfer-partial`` beside the blob it becomes;
a later pull asks for the rest with ``Range: bytes=N-``. The finished file is hashed, and only if
it has the Hub's sha256 is it renamed to ``blobs/<sha256>`` (a partial that does not match is
deleted). huggingface_hub then links it into ``snapshots/<commit>/`` and records the ref, as for
a file it downloaded itself, so it and every tool reading its cache find the file.

Only LFS files are fetched this way: their cache name (the ETag) is their sha256, which the
repository listing gives before any download. Others are small and go through `hf_hub_download`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import tqdm
from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
from huggingface_hub.file_download import http_get, repo_folder_name
from huggingface_hub.utils import WeakFileLock, build_hf_headers

PARTIAL_SUFFIX = ".edgeinfer-partial"


class PartialMismatch(Exception):
    """The finished partial file does not have the expected sha256 (it has been deleted)."""

    def __init__(self, digest: str) -> None:
        super().__init__(digest)
        self.digest = digest


class ChangedOnHub(Exception):
    """The Hub now serves other bytes under the path than the listing named (its ETag)."""

    def __init__(self, etag: str | None) -> None:
        super().__init__(etag)
        self.etag = etag


def blob_path(repo_id: str, sha256: str) -> Path:
    """Where huggingface_hub's cache keeps the LFS file with this sha256 for ``repo_id``."""
    repo = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo_id, repo_type="model")
    return repo / "blobs" / sha256


def partial_path(repo_id: str, sha256: str) -> Path:
    """The partial download of that file, kept between runs."""
    blob = blob_path(repo_id, sha256)
    return blob.with_name(blob.name + PARTIAL_SUFFIX)


def fetch_blob(repo_id: str, filename: str, revision: str, sha256: str, *,
               tqdm_class: type[tqdm.tqdm], hash_file: Callable[[Path], str],
               force: bool = False) -> bool:
    """Download ``filename`` (an LFS file with ``sha256``) to its blob in huggingface_hub's cache,
    resuming a partial left by an earlier run. False if the blob was there already (and ``force``
    is not set), True if it was downloaded and hashed now.

    ``hash_file`` hashes the finished partial (showing progress as it likes). Raises
    `PartialMismatch` or `ChangedOnHub`, and what huggingface_hub raises for HTTP and transport
    errors; after a transport error the partial keeps the bytes received, for the next run."""
    blob, partial = blob_path(repo_id, sha256), partial_path(repo_id, sha256)
    if blob.exists() and not force:
        return False
    url = hf_hub_url(repo_id, filename, revision=revision)
    meta = get_hf_file_metadata(url)  # token, endpoint and user agent as huggingface_hub sets them
    if meta.etag != sha256:
        raise ChangedOnHub(meta.etag)
    blob.parent.mkdir(parents=True, exist_ok=True)
    lock = Path(constants.HF_HUB_CACHE) / ".locks" / repo_folder_name(repo_id=repo_id, repo_type="model")
    lock.mkdir(parents=True, exist_ok=True)
    # Two pulls of one file must not append to one partial; huggingface_hub's own lock
    # (<etag>.lock) is taken by hf_hub_download afterwards, so this one has another name.
    with WeakFileLock(lock / f"{sha256}{PARTIAL_SUFFIX}.lock"):
        if blob.exists() and not force:
            return False  # another process finished it while this one waited
        if force:
            partial.unlink(missing_ok=True)
        have = partial.stat().st_size if partial.exists() else 0
        if meta.size is not None and have > meta.size:
            partial.unlink()  # longer than the file: not a prefix of it
            have = 0
        # Unbuffered: every chunk received is on disk, so a kill loses none of it.
        with open(partial, "ab", buffering=0) as out:
            http_get(meta.location, out, resume_size=have, headers=build_hf_headers(),
                     expected_size=meta.size, displayed_filename=filename, tqdm_class=tqdm_class)
        digest = hash_file(partial)
        if digest != sha256:
            partial.unlink(missing_ok=True)
            raise PartialMismatch(digest)
        os.replace(partial, blob)
    return True
