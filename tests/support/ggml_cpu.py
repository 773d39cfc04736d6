"""ggml's own CPU kernels through ctypes, to compare the core's with bit for bit: a type's vec_dot
and vec_dot_type from ggml_get_type_traits_cpu in a llama.cpp build's libggml-cpu.so (built for
this CPU: scripts/llamacpp_bin.py, or $EDGEINFER_LIBGGML), and ggml_rope_ext's cos and sin
through a one-op graph of libggml-base.so."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from support.llamacpp_venv import libggml_base, libggml_cpu


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


def require_isa_build(lib: ctypes.CDLL, isa: str) -> None:
    """Skips the calling test unless the library was built for `isa`'s ggml code paths. The
    library is built for this CPU; a run of AVX-512 kernels on an AVX2 CPU (the emulated build of
    scripts/test_avx512_emulated.sh) has no AVX-512 ggml to compare them with."""
    if isa == "avx512" and not lib.ggml_cpu_has_avx512():
        pytest.skip("this machine's libggml-cpu has no AVX-512 code paths to compare the AVX-512 kernels with")


def vec_dot_type(lib: ctypes.CDLL, qtype: int) -> int:
    """The type ggml quantizes activations to for `qtype` weights."""
    return lib.ggml_get_type_traits_cpu(qtype).contents.vec_dot_type


def vec_dot(lib: ctypes.CDLL, qtype: int, n: int, w: np.ndarray, y: np.ndarray) -> float:
    """ggml's vec_dot of n elements: w a row of `qtype`, y a row of its vec_dot_type (raw bytes)."""
    out = ctypes.c_float()
    _VecDot(lib.ggml_get_type_traits_cpu(qtype).contents.vec_dot)(n, ctypes.byref(out), 0, w.ctypes.data, 0,
                                                                   y.ctypes.data, 0, 1)
    return out.value


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


_GGML_TYPE_F32, _GGML_TYPE_I32 = 0, 26


def _graph_api() -> tuple[ctypes.CDLL, ctypes.CDLL]:
    """libggml-base.so (graph building) and libggml-cpu.so (computing it), with the signatures
    used here; skips the calling test where there is no build."""
    base_path = libggml_base()
    if base_path is None:
        pytest.skip("no libggml-base.so (build llama.cpp with scripts/llamacpp_bin.py, or set EDGEINFER_LIBGGML)")
    base = ctypes.CDLL(str(base_path), mode=ctypes.RTLD_GLOBAL)
    cpu = load_ggml_cpu()
    p = ctypes.c_void_p
    for name, restype, argtypes in [
        ("ggml_init", p, [_InitParams]),
        ("ggml_free", None, [p]),
        ("ggml_new_tensor_1d", p, [p, ctypes.c_int, ctypes.c_int64]),
        ("ggml_new_tensor_3d", p, [p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]),
        ("ggml_get_data", p, [p]),
        ("ggml_rope_ext", p, [p, p, p, p, ctypes.c_int, ctypes.c_int, ctypes.c_int] + [ctypes.c_float] * 6),
        ("ggml_new_graph", p, [p]),
        ("ggml_build_forward_expand", None, [p, p]),
    ]:
        getattr(base, name).restype, getattr(base, name).argtypes = restype, argtypes
    cpu.ggml_graph_compute_with_ctx.argtypes = [p, p, ctypes.c_int]
    return base, cpu


def _array(base: ctypes.CDLL, tensor: int, ctype: type, shape: tuple[int, ...]) -> np.ndarray:
    return np.ctypeslib.as_array(ctypes.cast(base.ggml_get_data(tensor), ctypes.POINTER(ctype)), shape)


def rope_cos_sin(n_rot: int, positions: list[int], freq_base: float, freq_scale: float = 1.0,
                 freq_factors: np.ndarray | None = None, attn_factor: float = 1.0, ext_factor: float = 0.0,
                 n_ctx_orig: int = 0, beta_fast: float = 32.0, beta_slow: float = 1.0) -> np.ndarray:
    """ggml_rope_ext's cos and sin per pair, [len(positions)][n_rot] float32 (cos, sin
    interleaved), computed by ggml itself: normal-mode RoPE of the vector (1, 0, 1, 0, ...), whose
    pairs come out as (cos * 1 - sin * 0, sin * 1 + cos * 0) = (cos, sin) exactly."""
    base, cpu = _graph_api()
    ctx = base.ggml_init(_InitParams(16 << 20, None, False))
    try:
        n = len(positions)
        x = base.ggml_new_tensor_3d(ctx, _GGML_TYPE_F32, n_rot, 1, n)   # [n tokens][1 head][n_rot]
        _array(base, x, ctypes.c_float, (n, n_rot))[:] = np.tile([1.0, 0.0], n_rot // 2)
        pos = base.ggml_new_tensor_1d(ctx, _GGML_TYPE_I32, n)
        _array(base, pos, ctypes.c_int32, (n,))[:] = positions
        factors = None
        if freq_factors is not None:
            factors = base.ggml_new_tensor_1d(ctx, _GGML_TYPE_F32, n_rot // 2)
            _array(base, factors, ctypes.c_float, (n_rot // 2,))[:] = freq_factors
        y = base.ggml_rope_ext(ctx, x, pos, factors, n_rot, 0, n_ctx_orig, freq_base, freq_scale, ext_factor,
                               attn_factor, beta_fast, beta_slow)
        graph = base.ggml_new_graph(ctx)
        base.ggml_build_forward_expand(graph, y)
        cpu.ggml_graph_compute_with_ctx(ctx, graph, 1)
        return _array(base, y, ctypes.c_float, (n, n_rot)).copy()
    finally:
        base.ggml_free(ctx)
