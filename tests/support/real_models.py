"""The real models: found in the models folder (``EDGEINFER_MODELS_DIR`` or the platformdirs
default) through the manifest, never pulled here; and the files derived from them (dequantized to
F32, requantized), made once into the models folder's derived/ dir by the scripts that make them
for people."""
from __future__ import annotations

from pathlib import Path

from edgeinfer.catalog import get_entry
from support.availability import unavailable
from support.paths import load_script


def model_path(name: str) -> Path:
    """The manifest entry's file; a missing one skips the test (fails it under scripts/test.sh)."""
    entry = get_entry(name)
    if not entry.is_present():
        unavailable(f"model {name!r} not found at {entry.path} "
                    f"(fetch it with `edgeinfer pull {name}` or scripts/fetch_models.py)")
    return entry.path


def smollm2_requantized(smollm2_path: Path, preset: str) -> Path:
    """SmolLM2 requantized from its Q4_1 file to Q4_0 or Q8_0 by gguf-py's reference quantizer
    (scripts/make_smollm2_variants.py: what llama-quantize --allow-requantize writes, tensor for
    tensor), made once into the models folder's derived/ dir (a few seconds)."""
    from gguf import GGMLQuantizationType

    target = smollm2_path.parent / "derived" / f"SmolLM2-135M-Instruct.{preset}.gguf"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        load_script("make_smollm2_variants").requantize_file(smollm2_path, target, GGMLQuantizationType[preset])
    return target


def derived_f32(source: Path, name: str) -> Path:
    """`source` with every tensor dequantized to F32 (the fp32 oracle's model), made once and
    kept in the models folder's derived/ dir: gguf-py's dequantization is bit-identical to
    llama.cpp's."""
    target = source.parent / "derived" / name
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        load_script("dequantize_gguf").dequantize_file(source, target, "f32")
    return target
