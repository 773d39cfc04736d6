#!/usr/bin/env python3
"""Makes SmolLM2-135M-Instruct Q4_0 and Q8_0 files from the Q4_1 original, the way
`llama-quantize --allow-requantize SRC OUT Q4_0|Q8_0` does (../shared/fixtures/REFERENCE.md §8):
every 2-D Q4_1 tensor is dequantized (gguf-py, bit-identical to llama.cpp) and quantized again
with gguf-py's port of ggml's reference quantizer; token_embd stays Q8_0 (llama.cpp's q6_K choice
falls back to Q8_0 because 576 % 256 != 0) and 1-D tensors stay F32. Metadata is copied verbatim
except general.file_type (2 = MOSTLY_Q4_0, 7 = MOSTLY_Q8_0).

Checked: all 272 tensors are byte-identical to llama-quantize's output (made with
llama-cpp-python 0.3.36's llama_model_quantize, whose files have exactly the sha256 listed in
REFERENCE.md §8); only the metadata section differs (key order and llama.cpp's extra keys).

    python scripts/make_smollm2_variants.py [MODELS_DIR]     # writes MODELS_DIR/derived/*.gguf
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T, GGUFReader, GGUFWriter
from gguf.quants import dequantize, quantize

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dequantize_gguf import copy_metadata  # noqa: E402

SOURCE = "SmolLM2-135M-Instruct.Q4_1.gguf"
FILE_TYPES = {T.Q4_0: 2, T.Q8_0: 7}


def requantize_file(src: Path, dst: Path, qtype: T) -> None:
    reader = GGUFReader(src)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    tmp = dst.with_name(dst.name + ".tmp")
    writer = GGUFWriter(tmp, arch)
    copy_metadata(reader, writer, FILE_TYPES[qtype])
    for t in reader.tensors:
        src_type = T(t.tensor_type)
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))  # numpy order: rows first
        if src_type == T.Q4_1 and len(shape) == 2:
            data = dequantize(t.data, src_type).reshape(shape).astype(np.float32)
            q = quantize(data, qtype)
            writer.add_tensor(t.name, q, raw_shape=q.shape, raw_dtype=qtype)
        else:  # token_embd (Q8_0) and the F32 norms: as they are
            writer.add_tensor(t.name, np.asarray(t.data), raw_shape=np.asarray(t.data).shape, raw_dtype=src_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, dst)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models_dir", type=Path, nargs="?", default=None,
                    help="folder holding the Q4_1 original (default: EDGEINFER_MODELS_DIR or the models folder)")
    args = ap.parse_args()
    models_dir = args.models_dir
    if models_dir is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from edgeinfer.catalog import get_entry
        models_dir = get_entry("smollm2-135m-instruct").path.parent
    src = models_dir / SOURCE
    if not src.exists():
        sys.exit(f"not found: {src}")
    (models_dir / "derived").mkdir(exist_ok=True)
    for qtype in (T.Q4_0, T.Q8_0):
        dst = models_dir / "derived" / f"SmolLM2-135M-Instruct.{qtype.name}.gguf"
        requantize_file(src, dst, qtype)
        print(f"{dst} ({dst.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
