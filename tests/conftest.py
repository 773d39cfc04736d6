"""Shared test fixtures (the helpers behind them are plain functions in tests/support/):

- the reference-data folder and its JSON files;
- the real model files and the F32 files derived from them (support/real_models.py: a missing
  model skips its tests, unless EDGEINFER_REQUIRE_MODELS=1, set by scripts/test.sh, which fetches
  them first: then it fails), and requantized copies made in the test run;
- the OpenCL device the offload tests run on, and a temporary kernel cache;
- the tiny random-weight llama (support/tiny_llama.py) most unit tests decode with.
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

# The bit-exact tests compare with llama.cpp's logits, so the suite runs in llama.cpp's float order
# (the product's default is the fast order, cpu/kernels.h FloatOrder); tests of the fast order ask
# for it per model (`_core.Model(path, exact=False)`). Set before the core first reads it, and
# inherited by the CLI and server subprocesses the tests start.
os.environ.setdefault("EDGEINFER_EXACT", "1")

from support.availability import unavailable  # noqa: E402
from support.paths import REPO_ROOT  # noqa: E402
from support.real_models import derived_f32, model_path  # noqa: E402
from support.tiny_llama import TinyConfig, write_tiny_llama  # noqa: E402


# ---- reference data ------------------------------------------------------------------------

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


# ---- real models ---------------------------------------------------------------------------

@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """The SmolLM2-135M-Instruct Q4_1 GGUF file."""
    return model_path("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    """The Gemma 3 270M Q4_K_M GGUF file."""
    return model_path("gemma3-270m")


@pytest.fixture(scope="session")
def smollm2_f32_path(smollm2_path: Path) -> Path:
    """SmolLM2 dequantized to F32."""
    return derived_f32(smollm2_path, "SmolLM2-135M-Instruct.F32.gguf")


@pytest.fixture(scope="session")
def gemma3_f32_path(gemma3_path: Path) -> Path:
    """Gemma 3 270M dequantized to F32 (about 1.08 GB; the first run takes a minute or two)."""
    return derived_f32(gemma3_path, "gemma-3-270m.F32-dequant-from-Q4_K_M.gguf")


@pytest.fixture(scope="session")
def requantized(tmp_path_factory) -> Callable[[Path, str], Path]:
    """``requantized(path, "Q8_0")`` -> the model at `path` requantized to that preset by our
    quantizer (a second or two for the real models), made once in this run: another quantization
    of the same model and vocabulary, e.g. a target for `path` as a draft model."""
    made: dict[tuple[Path, str], Path] = {}

    def get(path: Path, preset: str) -> Path:
        from edgeinfer.quantize import QuantizeOptions, quantize_file

        if (path, preset) not in made:
            out = tmp_path_factory.mktemp("requantized") / f"{path.stem}.{preset}.gguf"
            with warnings.catch_warnings():   # "requantizing ...: the result is worse": known, and no matter
                warnings.simplefilter("ignore", UserWarning)
                quantize_file(path, out, QuantizeOptions(preset, allow_requantize=True), n_threads=2)
            made[path, preset] = out
        return made[path, preset]

    return get


# ---- OpenCL --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def opencl_devices() -> list[dict]:
    """The OpenCL devices the run-time loaded library lists (honouring EDGEINFER_OPENCL_LIBRARY,
    like the CLI). None skips the test; under CI=true or EDGEINFER_REQUIRE_MODELS=1 (where
    scripts/test.sh installed PoCL) it fails."""
    from edgeinfer.gpu.devices import list_devices

    found, reason = list_devices()
    if not found:
        unavailable(f"no OpenCL device ({reason}); install pocl-opencl-icd and ocl-icd-libopencl1", in_ci=True)
    return found


@pytest.fixture(scope="module")
def device_index(opencl_devices: list[dict]) -> int:
    """The index of the device the offload tests use: the first."""
    return 0


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


# ---- the tiny random-weight llama ----------------------------------------------------------

@pytest.fixture(scope="session")
def tiny_llama_file(tmp_path_factory) -> Callable[..., tuple[Path, dict[str, np.ndarray]]]:
    """``tiny_llama_file(cfg=TinyConfig(), seed=0)`` -> (path, the weights as stored): the tiny
    llama of that config and seed, written once in this run (tests only read the file)."""
    written: dict[tuple[TinyConfig, int], tuple[Path, dict[str, np.ndarray]]] = {}

    def get(cfg: TinyConfig = TinyConfig(), seed: int = 0) -> tuple[Path, dict[str, np.ndarray]]:
        if (cfg, seed) not in written:
            path = tmp_path_factory.mktemp("tiny-llama") / "tiny.gguf"
            written[cfg, seed] = path, write_tiny_llama(path, cfg, seed=seed)
        return written[cfg, seed]

    return get


@pytest.fixture(scope="session")
def tiny_llama_path(tiny_llama_file) -> Path:
    """The default tiny llama (TinyConfig(), seed 0)."""
    return tiny_llama_file()[0]


@pytest.fixture
def tiny_llama(tiny_llama_path: Path):
    """A fresh Model of the tiny llama: a 64-token context, 2 threads."""
    from edgeinfer.model import Model

    return Model.load(tiny_llama_path, n_ctx=64, n_threads=2)
