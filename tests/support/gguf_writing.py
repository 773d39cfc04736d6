"""gguf-py's GGUFWriter as the tests use it: float weights stored as a weight type (and read back
as the file holds them), and the file written out."""
from __future__ import annotations

from typing import Collection

import gguf
import numpy as np


def add_weights(writer: gguf.GGUFWriter, weights: dict[str, np.ndarray], weight_type: str,
                plain: Collection[str] = ()) -> dict[str, np.ndarray]:
    """Adds `weights` (float32, keyed by tensor name); the matrices but those named in `plain` are
    stored as `weight_type` (F32, F16, or a quantized type gguf-py or the core quantizes), the
    rest as F32. Returns every tensor as stored, dequantized to float32: what an exact reference
    must compute with."""
    qtype = gguf.GGMLQuantizationType[weight_type]
    stored: dict[str, np.ndarray] = {}
    for name, value in weights.items():
        if value.ndim != 2 or name in plain or qtype == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(name, value)
            stored[name] = value
        elif qtype == gguf.GGMLQuantizationType.F16:
            data = value.astype(np.float16)
            writer.add_tensor(name, data)
            stored[name] = data.astype(np.float32)
        else:
            data = _quantize(value, qtype)
            writer.add_tensor(name, data, raw_dtype=qtype)
            stored[name] = gguf.quants.dequantize(data, qtype).reshape(value.shape).astype(np.float32)
    return stored


def _quantize(value: np.ndarray, qtype: gguf.GGMLQuantizationType) -> np.ndarray:
    """gguf-py's quantizer, or for the types it only reads (the i-quants) the core's, which writes
    llama-quantize's bytes (test_quantize_core.py), or for the types neither quantizes without an
    importance matrix stand-in blocks (_stand_in_blocks): uint8 [rows, row_bytes] in every case."""
    try:
        return gguf.quants.quantize(value, qtype)
    except NotImplementedError:
        from edgeinfer import _core

        if not _core.has_quantizer(int(qtype)) or _core.quantizer_needs_imatrix(int(qtype)):
            return _stand_in_blocks(value, qtype)
        return _core.quantize_rows(int(qtype), np.ascontiguousarray(value, np.float32))


# Types whose blocks start with their fp16 scale d and are valid whatever their other bytes hold.
_STAND_IN_TYPES = {gguf.GGMLQuantizationType.IQ2_XXS, gguf.GGMLQuantizationType.IQ2_XS,
                   gguf.GGMLQuantizationType.IQ2_S, gguf.GGMLQuantizationType.IQ3_XXS,
                   gguf.GGMLQuantizationType.IQ3_S}


def _stand_in_blocks(value: np.ndarray, qtype: gguf.GGMLQuantizationType) -> np.ndarray:
    """Random blocks, each with its d chosen so that its values have the root mean square of the
    weights it stands for: not a quantization of `value`, but weights of its shape and magnitude,
    for a model whose exact reference computes with what the file stores."""
    assert qtype in _STAND_IN_TYPES, qtype
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    blocks_of_value = value.reshape(-1, block_size).astype(np.float64)
    rng = np.random.default_rng(value.shape[0] * 7919 + value.shape[1])
    blocks = rng.integers(0, 256, (blocks_of_value.shape[0], type_size), dtype=np.uint8)
    blocks[:, 0:2] = np.array([1.0], dtype=np.float16).view(np.uint8)
    unit = gguf.quants.dequantize(blocks, qtype).astype(np.float64)
    d = np.sqrt((blocks_of_value ** 2).mean(axis=1) / np.maximum((unit ** 2).mean(axis=1), 1e-30))
    blocks[:, 0:2] = d.astype(np.float16).reshape(-1, 1).view(np.uint8)
    return blocks.reshape(value.shape[0], -1)


def write_out(writer: gguf.GGUFWriter) -> None:
    """Writes the header, the metadata and the tensors, and closes the file."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
