"""Tiny random-weight models carrying a real chat template (one llama.cpp ships, fetched by
scripts/fetch_chat_templates.py) and the template's special tokens: for tests of prompts, tool
formats and reasoning that need the template, not a trained model."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from edgeinfer.model import Model
from support.availability import unavailable
from support.paths import load_script
from support.tiny_llama import TinyConfig, write_tiny_llama


def tiny_model_with_template(folder: Path, template: str, markers: Sequence[str] = (), n_ctx: int = 4096,
                             n_threads: int = 1) -> Model:
    """A tiny llama in `folder` whose chat template is `template` (a file name of the fetched
    templates) and whose vocabulary adds `markers` as control tokens."""
    templates = load_script("fetch_chat_templates").templates_dir()
    if not (templates / template).exists():
        unavailable(f"{template} not found in {templates} (run scripts/fetch_chat_templates.py)")
    path = folder / "tiny.gguf"
    write_tiny_llama(path, TinyConfig(n_ctx_train=n_ctx), extra_tokens=[(m, 3) for m in markers],
                     chat_template=(templates / template).read_text())
    return Model.load(path, n_ctx=n_ctx, n_threads=n_threads)
