"""Shared test fixtures: the reference-data folder and the real model files.

Real models are looked up in the models folder (``EDGEINFER_MODELS_DIR`` or the platformdirs
default) through the manifest, never pulled here. A missing model skips its tests, unless
``EDGEINFER_REQUIRE_MODELS=1`` (set by scripts/test.sh, which fetches them first): then it fails.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import pytest

from edgeinfer.catalog import get_entry

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """Reference data from other engines: ``$EDGEINFER_FIXTURES`` or ``../shared/fixtures``
    relative to the repository root."""
    override = os.environ.get("EDGEINFER_FIXTURES")
    path = Path(override) if override else REPO_ROOT.parent / "shared" / "fixtures"
    if not path.is_dir():
        pytest.skip(f"fixtures folder not found: {path} (set EDGEINFER_FIXTURES)")
    return path


@pytest.fixture(scope="session")
def load_fixture(fixtures_dir: Path) -> Callable[[str], Any]:
    """``load_fixture("tokenizer_smollm2")`` (or with ``.json``) -> the parsed JSON file."""

    def load(name: str) -> Any:
        path = fixtures_dir / (name if name.endswith(".json") else f"{name}.json")
        return json.loads(path.read_text(encoding="utf-8"))

    return load


def _model_path(name: str) -> Path:
    entry = get_entry(name)
    if entry.is_present():
        return entry.path
    message = (f"model {name!r} not found at {entry.path} "
               f"(fetch it with `edgeinfer pull {name}` or scripts/fetch_models.py)")
    if os.environ.get("EDGEINFER_REQUIRE_MODELS") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """The SmolLM2-135M-Instruct Q4_1 GGUF file."""
    return _model_path("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    """The Gemma 3 270M Q4_K_M GGUF file."""
    return _model_path("gemma3-270m")


def _load_script(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def smollm2_requantized(smollm2_path: Path, preset: str) -> Path:
    """SmolLM2 requantized from its Q4_1 file to Q4_0 or Q8_0 by gguf-py's reference quantizer
    (scripts/make_smollm2_variants.py: what llama-quantize --allow-requantize writes, tensor for
    tensor), made once into the models folder's derived/ dir (a few seconds)."""
    from gguf import GGMLQuantizationType

    target = smollm2_path.parent / "derived" / f"SmolLM2-135M-Instruct.{preset}.gguf"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        _load_script("make_smollm2_variants").requantize_file(
            smollm2_path, target, GGMLQuantizationType[preset])
    return target


def _derived_f32(source: Path, name: str) -> Path:
    """`source` with every tensor dequantized to F32 (the fp32 oracle's model), made once and
    kept in the models folder's derived/ dir: gguf-py's dequantization is bit-identical to
    llama.cpp's."""
    target = source.parent / "derived" / name
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        _load_script("dequantize_gguf").dequantize_file(source, target, "f32")
    return target


@pytest.fixture(scope="session")
def smollm2_f32_path(smollm2_path: Path) -> Path:
    """SmolLM2 dequantized to F32."""
    return _derived_f32(smollm2_path, "SmolLM2-135M-Instruct.F32.gguf")


@pytest.fixture(scope="session")
def gemma3_f32_path(gemma3_path: Path) -> Path:
    """Gemma 3 270M dequantized to F32 (about 1.08 GB; the first run takes a minute or two)."""
    return _derived_f32(gemma3_path, "gemma-3-270m.F32-dequant-from-Q4_K_M.gguf")


@pytest.fixture(scope="module")
def opencl_cache_in_a_temp_folder(tmp_path_factory):
    """Compiled OpenCL kernels go to a folder of this test run, not the user's cache (the
    variable is inherited by child processes, so CLI and server tests use it too)."""
    old = os.environ.get("EDGEINFER_OPENCL_CACHE_DIR")
    os.environ["EDGEINFER_OPENCL_CACHE_DIR"] = str(tmp_path_factory.mktemp("opencl-cache"))
    yield
    if old is None:
        os.environ.pop("EDGEINFER_OPENCL_CACHE_DIR", None)
    else:
        os.environ["EDGEINFER_OPENCL_CACHE_DIR"] = old
