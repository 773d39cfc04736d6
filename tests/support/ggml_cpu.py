"""ggml's own CPU kernels through ctypes, to compare the core's with bit for bit: a type's vec_dot
and vec_dot_type from ggml_get_type_traits_cpu in a llama.cpp build's libggml-cpu.so (built for
this CPU: scripts/llamacpp_bin.py, or $EDGEINFER_LIBGGML)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from support.llamacpp_venv import libggml_cpu


class _TypeTraitsCpu(ctypes.Structure):
    _fields_ = [("from_float", ctypes.c_void_p), ("vec_dot", ctypes.c_void_p),
                ("vec_dot_type", ctypes.c_int), ("nrows", ctypes.c_int64)]


_VecDot = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t, ctypes.c_void_p,
                           ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)


def load_ggml_cpu() -> ctypes.CDLL:
    """The library, initialised (ggml_cpu_init fills the fp16 and E8M0 tables its kernels read);
    skips the calling test where there is none."""
    path = libggml_cpu()
    if path is None:
        pytest.skip("no libggml-cpu.so (build llama.cpp with scripts/llamacpp_bin.py, or set EDGEINFER_LIBGGML)")
    lib = ctypes.CDLL(str(path))
    lib.ggml_cpu_init()
    lib.ggml_get_type_traits_cpu.restype = ctypes.POINTER(_TypeTraitsCpu)
    lib.ggml_get_type_traits_cpu.argtypes = [ctypes.c_int]
    return lib


def vec_dot_type(lib: ctypes.CDLL, qtype: int) -> int:
    """The type ggml quantizes activations to for `qtype` weights."""
    return lib.ggml_get_type_traits_cpu(qtype).contents.vec_dot_type


def vec_dot(lib: ctypes.CDLL, qtype: int, n: int, w: np.ndarray, y: np.ndarray) -> float:
    """ggml's vec_dot of n elements: w a row of `qtype`, y a row of its vec_dot_type (raw bytes)."""
    out = ctypes.c_float()
    _VecDot(lib.ggml_get_type_traits_cpu(qtype).contents.vec_dot)(n, ctypes.byref(out), 0, w.ctypes.data, 0,
                                                                   y.ctypes.data, 0, 1)
    return out.value
