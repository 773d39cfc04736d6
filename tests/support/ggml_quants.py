"""ggml's own weight quantizer through ctypes, to compare the core's bytes with: ggml_quantize_chunk
of a llama.cpp build's libggml-base.so (scripts/llamacpp_bin.py, or $EDGEINFER_LIBGGML), with or
without an importance matrix, as llama-quantize calls it."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from edgeinfer import _core
from support.llamacpp_venv import libggml_base


def load_ggml_base() -> ctypes.CDLL:
    """The library with ggml_quantize_chunk's signature set; skips the calling test where there is
    none."""
    path = libggml_base()
    if path is None:
        pytest.skip("no libggml-base.so (build llama.cpp with scripts/llamacpp_bin.py, or set EDGEINFER_LIBGGML)")
    lib = ctypes.CDLL(str(path))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    return lib


def ggml_quantize(lib: ctypes.CDLL, qtype: int, x: np.ndarray, imatrix: np.ndarray | None = None) -> np.ndarray:
    """ggml_quantize_chunk of rows x [rows, n_per_row] -> uint8 [rows, row_bytes]: what llama-quantize
    writes, with `imatrix` (n_per_row float32 weights for every row) or without."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    info = _core.type_info(qtype)
    out = np.zeros((x.shape[0], x.shape[1] // info["block_size"] * info["type_size"]), dtype=np.uint8)
    weights = None
    if imatrix is not None:
        imatrix = np.ascontiguousarray(imatrix, dtype=np.float32)
        assert imatrix.shape == (x.shape[1],)
        weights = imatrix.ctypes.data
    lib.ggml_quantize_chunk(qtype, x.ctypes.data, out.ctypes.data, 0, x.shape[0], x.shape[1], weights)
    return out
