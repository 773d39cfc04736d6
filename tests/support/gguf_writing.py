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
    llama-quantize's bytes (test_quantize_core.py): uint8 [rows, row_bytes] either way."""
    try:
        return gguf.quants.quantize(value, qtype)
    except NotImplementedError:
        from edgeinfer import _core

        return _core.quantize_rows(int(qtype), np.ascontiguousarray(value, np.float32))


def write_out(writer: gguf.GGUFWriter) -> None:
    """Writes the header, the metadata and the tensors, and closes the file."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
