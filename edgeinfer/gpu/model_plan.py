"""The placement plan of a model file: its tensor table and attention sizes turned into the
per-layer costs placement.py plans with, and the devices of this machine. Used by ``edgeinfer
info --gpu-layers`` (which prints the plan) and by `Model.load(gpu_layers=...)` (which follows it);
neither reads a weight to make it."""
from __future__ import annotations

import warnings
from typing import Any, Iterable

from gguf import GGMLQuantizationType

from edgeinfer import _core
from edgeinfer.errors import EdgeInferError, ModelFormatError
from edgeinfer.gpu.devices import list_devices, opencl_library
from edgeinfer.gpu.placement import Placement, model_costs, parse_gpu_layers, plan_placement


def kv_row_bytes(kv_type: str, dim: int) -> int | None:
    """Bytes of a cache row of `dim` values of `kv_type`, from the core's type table (the gguf
    package names the type's id); None if the blocks do not fit."""
    info = _core.type_info(int(GGMLQuantizationType[kv_type.upper()]))
    block = int(info["block_size"])
    return dim // block * int(info["type_size"]) if dim % block == 0 else None


def kv_bytes_per_token(gguf: Any, kv_types: Iterable[str]) -> dict[str, int] | None:
    """KV cache bytes per token for each cache type (K and V of the same type), from the
    hyper-parameters as the core reads them; None if the file lacks them (or has ones the core
    refuses)."""
    try:
        hparams = gguf.hparams()
    except ModelFormatError:
        return None
    n_layer, kv_width = hparams["n_layer"], hparams["kv_width"]
    out = {}
    for name in kv_types:
        row = kv_row_bytes(name, kv_width)
        if row is not None:
            out[name] = n_layer * 2 * row
    return out


def centered_cache_extra_bytes(kv_types: tuple[str, str], k_dim: int, v_dim: int) -> int:
    """Bytes a layer's cache holds besides its rows with these types and the default K format: a
    q4_0 K is centered (kv/centered_k.h), which keeps the first kv_sink_rows positions of K and V
    in F16 and the K mean and scale and the V mean as floats."""
    if kv_types[0] != "q4_0":
        return 0
    return _core.kv_sink_rows * (k_dim + v_dim) * 2 + (2 * k_dim + v_dim) * 4


def conv_state_bytes(gguf: Any, hparams: dict) -> int:
    """Bytes of a short-convolution layer's recurrent state (LFM2: each channel's last l_cache - 1
    values, floats, as engine/context.cpp sizes it); 0 for a model without such layers."""
    l_cache = gguf.get(f"{hparams['arch']}.shortconv.l_cache")
    return (int(l_cache) - 1) * hparams["n_embd"] * 4 if l_cache else 0


def plan_for_file(gguf: Any, gpu_layers: str, device: int = 0, n_ctx: int = 4096,
                  kv_types: tuple[str, str] = ("f16", "f16"), require_gpu: bool = False) -> Placement:
    """The plan for `gpu_layers` (placement.parse_gpu_layers' syntax) on OpenCL device `device`
    for a model file (a _core.GgufFile), with a KV cache of n_ctx positions of kv_types."""
    hparams = gguf.hparams()  # the core's reading: a file it cannot size raises ModelFormatError
    n_layer, k_dim = hparams["n_layer"], hparams["kv_width"]
    v_dim = k_dim
    k_row, v_row = kv_row_bytes(kv_types[0], k_dim), kv_row_bytes(kv_types[1], v_dim)
    if k_row is None or v_row is None:
        raise EdgeInferError(f"KV rows of {k_dim}/{v_dim} values do not fit {kv_types[0]}/{kv_types[1]} blocks")
    costs = model_costs(gguf.tensors(), n_layer, n_ctx, k_row + v_row, kv_types,
                        centered_cache_extra_bytes(kv_types, k_dim, v_dim), conv_state_bytes(gguf, hparams))
    request = parse_gpu_layers(str(gpu_layers))
    devices, reason = list_devices() if request.wants_gpu else ([], "")
    return plan_placement(costs, request, devices, device, _core.opencl_matmul_types(),
                          no_device_reason=reason, require_gpu=require_gpu)


def offload_arguments(plan: Placement) -> dict:
    """The keyword arguments of _core.Context that carry out `plan` ({} when nothing is offloaded)."""
    if not plan.gpu_layers:
        return {}
    from edgeinfer.paths import opencl_cache_dir

    return {"gpu_layers": list(plan.gpu_layers), "gpu_device": plan.device_index,
            "opencl_library": opencl_library(), "opencl_cache_dir": str(opencl_cache_dir())}


def plan_offload(gguf: Any, gpu_layers: str, device: int, n_ctx: int, kv_types: tuple[str, str],
                 require_gpu: bool = False) -> tuple[Placement, dict]:
    """The plan for a context (plan_for_file) and the _core.Context keywords that carry it out
    (offload_arguments; {} when nothing is offloaded). The KV cache keeps the CPU's defaults (a
    q4_0 K rotated and centered): the device stores and attends over the same format. Offload
    asked for but no device: a warning with the reason (the context then runs on the CPU)."""
    plan = plan_for_file(gguf, gpu_layers, device, n_ctx, kv_types, require_gpu)
    if plan.device is None and plan.notes and gpu_layers != "0":
        warnings.warn(plan.notes[0], stacklevel=3)
    return plan, offload_arguments(plan)
