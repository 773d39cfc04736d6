"""What a server can serve: one model file (`edgeinfer serve MODEL`), or every model in the models
folder and every known model of the catalog (`edgeinfer serve` without one), each under the names
a request's "model" may use. Nothing here loads a model; `memory_estimate` says what loading one
would cost from its file alone."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from edgeinfer import _core
from edgeinfer.catalog import ModelEntry, load_manifest
from edgeinfer.gpu.model_plan import kv_bytes_per_token
from edgeinfer.paths import models_dir

# The later parts of a split file (name-00002-of-00003.gguf) are loaded through the first.
SPLIT_PART = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")


@dataclass(frozen=True)
class ServedModel:
    """One model the server can serve. `path` is where its file is (or will be, once pulled)."""

    model_id: str                   # the id /v1/models reports
    accepted_ids: frozenset[str]    # every id a request's "model" may name
    path: Path
    entry: ModelEntry | None = None  # the catalog's entry, for a known model (pulled on first use)

    @property
    def present(self) -> bool:
        return self.path.is_file() if self.entry is None else self.entry.is_present()

    @property
    def file_size(self) -> int:
        """Bytes on disk: the catalog's figure before the pull."""
        if self.entry is not None and not self.present:
            return self.entry.size
        try:
            return sum(part.stat().st_size for part in split_parts(self.path))
        except OSError:
            return 0


def model_ids(path: Path, requested: str | None, alias: str | None) -> tuple[str, frozenset[str]]:
    """The model id to report and every id a request may use for this model: the alias, the
    name it was asked for, its manifest name and aliases, the file name and its stem."""
    names = {path.name, path.stem}
    entry_name = None
    for entry in load_manifest().values():
        if entry.filename == path.name:
            entry_name = entry.name
            names.update({entry.name, *entry.aliases})
    if requested:
        names.add(requested)
    model_id = alias or entry_name or path.stem
    names.add(model_id)
    return model_id, frozenset(names)


def single_model(path: Path, requested: str | None, alias: str | None) -> ServedModel:
    model_id, accepted = model_ids(path, requested, alias)
    return ServedModel(model_id, accepted, path)


def split_parts(path: Path) -> list[Path]:
    """The files of a model: the first part of a split GGUF brings the others."""
    match = SPLIT_PART.search(path.name)
    if not match:
        return [path]
    stem, count = path.name[:match.start()], int(match.group(2))
    return [path.with_name(f"{stem}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]


def folder_models(folder: Path | None = None) -> list[ServedModel]:
    """Every model the models folder holds (its top level; a split file once, by its first part)
    and every catalog model, pulled or not; catalog names first, then files by name."""
    folder = models_dir() if folder is None else folder
    served: dict[str, ServedModel] = {}
    for entry in load_manifest().values():
        names = frozenset({entry.name, *entry.aliases, entry.filename, Path(entry.filename).stem})
        served[entry.name] = ServedModel(entry.name, names, entry.path, entry)
    known_files = {entry.filename for entry in load_manifest().values()}
    # Files only: a folder, or a link to nothing, named *.gguf can never load (nor be pulled).
    files = sorted(p for p in folder.glob("*.gguf") if p.is_file()) if folder.is_dir() else []
    for path in files:
        match = SPLIT_PART.search(path.name)
        if path.name in known_files or (match and match.group(1) != "00001"):
            continue
        stem = path.name[:match.start()] if match else path.stem
        ids = frozenset({path.name, path.stem, stem})
        if stem not in served:
            served[stem] = ServedModel(stem, ids, path)
    return list(served.values())


def find(served: list[ServedModel], requested: str) -> ServedModel | None:
    """The model `requested` names: by any of its ids, or with Ollama's ":latest" tag; or a
    Hugging Face name (hf.co/OWNER/REPO[:QUANT]) already in huggingface_hub's cache."""
    for name in (requested, requested.removesuffix(":latest")):
        for model in served:
            if name in model.accepted_ids:
                return model
    return hub_model(requested)


def is_hub_name(requested: str) -> bool:
    """Whether `requested` names a Hugging Face model (hf.co/OWNER/REPO[:QUANT]), which
    `edgeinfer pull` can fetch."""
    if "/" not in requested:
        return False  # and the Hub module (with huggingface_hub) is not imported
    from edgeinfer import hub
    return hub.is_hub_name(requested)


def hub_model(requested: str) -> ServedModel | None:
    """A pulled Hugging Face model under its canonical name, found without a request. One not
    pulled yet is not served (the loader takes a path; it would have to pull first)."""
    if not is_hub_name(requested):
        return None
    from edgeinfer.hub import HubError, cached_hub_model, parse_hub_name
    try:
        path = cached_hub_model(requested)
        model_id = str(parse_hub_name(requested))
    except HubError:
        return None
    return None if path is None else ServedModel(model_id, frozenset({model_id, requested}), path)


def memory_estimate(model: ServedModel, n_ctx: int, n_parallel: int, cache_type: str) -> int:
    """Bytes a loaded `model` holds: its weights (mapped from the file, which they become
    resident as) and its KV cache for `n_parallel` sequences of `n_ctx` tokens (the model's own
    context when `n_ctx` is 0). Before the pull, the weights alone."""
    weights = model.file_size
    if not model.present:
        return weights
    try:
        gguf = _core.GgufFile(str(model.path))
        per_token = (kv_bytes_per_token(gguf, [cache_type]) or {}).get(cache_type, 0)
        trained = int(gguf.get(f"{gguf.get('general.architecture')}.context_length") or 0)
    except Exception:  # noqa: BLE001 - a file that cannot be read fails at loading, with the reason
        return weights
    tokens = min(n_ctx, trained) if n_ctx and trained else (n_ctx or trained)
    return weights + per_token * tokens * n_parallel
