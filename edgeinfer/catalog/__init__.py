"""The catalog of known models: a short name -> where to fetch the GGUF file and its checksum.

The manifest (``manifest.json`` beside this file) is the one place model sources are written
down; `edgeinfer.pull` fetches from it and `resolve_model` turns a name or a path into a file.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from edgeinfer.errors import EdgeInferError
from edgeinfer.paths import models_dir


class UnknownModelError(EdgeInferError):
    """A model name that is neither an existing file nor in the manifest."""


@dataclass(frozen=True)
class PackageRef:
    """One PyPI distribution pinned to an exact version."""

    name: str
    version: str

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class ModelEntry:
    """One manifest entry. ``files`` are paths inside the wheels, concatenated in order."""

    name: str
    description: str
    default: bool
    packages: tuple[PackageRef, ...]
    files: tuple[str, ...]
    filename: str
    sha256: str
    size: int
    aliases: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        """Where the model file lives (or will live) in the models folder."""
        return models_dir() / self.filename

    def is_present(self) -> bool:
        """True when the file is in the models folder with the expected size.

        The size check is cheap; the checksum is verified by `edgeinfer.pull.pull_model`.
        """
        try:
            return self.path.stat().st_size == self.size
        except OSError:
            return False


def _parse_entry(name: str, raw: dict) -> ModelEntry:
    source = raw["source"]
    if source.get("kind") != "pypi":
        raise EdgeInferError(
            f"manifest entry {name!r}: unsupported source kind {source.get('kind')!r}")
    return ModelEntry(
        name=name,
        description=raw.get("description", ""),
        default=bool(raw.get("default", False)),
        aliases=tuple(raw.get("aliases", ())),
        packages=tuple(PackageRef(p["name"], p["version"]) for p in source["packages"]),
        files=tuple(source["files"]),
        filename=raw["filename"],
        sha256=raw["sha256"].lower(),
        size=int(raw["size"]),
    )


@lru_cache(maxsize=1)
def load_manifest() -> dict[str, ModelEntry]:
    """All known models, by name, in manifest order."""
    text = resources.files(__package__).joinpath("manifest.json").read_text(encoding="utf-8")
    return {name: _parse_entry(name, raw) for name, raw in json.loads(text).items()}


def known_names() -> list[str]:
    """The names of all known models."""
    return list(load_manifest())


def default_model_name() -> str:
    """The name of the manifest's default model."""
    for entry in load_manifest().values():
        if entry.default:
            return entry.name
    return next(iter(load_manifest()))


def entry_for_file(path: Path) -> ModelEntry | None:
    """The manifest entry whose file `path` is, wherever it lies, known by its file name and
    size (hashing it again would take seconds a gigabyte; pull verified the checksum)."""
    try:
        size = path.stat().st_size
    except OSError:
        return None
    return next((e for e in load_manifest().values() if e.filename == path.name and e.size == size), None)


def get_entry(name: str) -> ModelEntry:
    """The manifest entry for ``name`` or one of its short aliases (``smollm2``);
    `UnknownModelError` listing the known names otherwise."""
    manifest = load_manifest()
    if name in manifest:
        return manifest[name]
    for entry in manifest.values():
        if name in entry.aliases:
            return entry
    raise UnknownModelError(
        f"unknown model {name!r}; known models: {', '.join(known_names())} "
        "(or give the path of a .gguf file)"
    )
