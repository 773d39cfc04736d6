"""Which layers run on the OpenCL device: the placement plan, computed from the model file's tensor
table and the device's memory alone (no weights are read, nothing is allocated), so ``edgeinfer
info --gpu-layers ...`` can print it and the loader can follow it.

``gpu_layers`` (``Model.load``'s keyword, ``--gpu-layers`` on the command line) takes llama.cpp's
``-ngl`` meaning and more:

- ``N``: the last N repeating layers (blocks ``n_layer - N .. n_layer - 1``); ``0`` is CPU only,
  and N above the layer count means all of them.
- ``all``: every repeating layer.
- ``auto``: as many of the last layers as fit the device's memory with a margin (see
  `AUTO_MARGIN_FRACTION`); the plan says how the number came out.
- ``0-5,12``: exactly these layers (ranges inclusive).

The token embeddings, the output norm and the output matrix stay on the CPU (llama.cpp offloads
the output matrix when N exceeds the layer count; that is not done yet). The hidden state crosses
between CPU and device only at the boundaries of the offloaded ranges, so the plan also lists the
ranges: one contiguous range is two crossings per forward pass.

A layer is offloaded only if the device has a matmul for each of its weight types
(``_core.opencl_matmul_types()``), none of its tensors exceeds the device's largest allocation and
it is not an LFM2-MoE mixture of experts (sigmoid gating with a selection bias: no device path
for it yet); otherwise it stays on the CPU and the plan says why. Other mixture-of-experts layers
go like any other (their expert stacks are matrices of the listed types), and so do LFM2's
short-convolution layers (their recurrent state kept on the device).

Errors and notes name the settings as `Wording`s: ``gpu_layers='auto'`` as they are, ``--gpu-layers
auto`` when the command line prints them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from edgeinfer.errors import EdgeInferError
from edgeinfer.wording import DEVICE_LIST, Ref, Spelling, Wording, keyword_spelling, spelled

GIB = 1024 ** 3
MIB = 1024 ** 2

# `auto` keeps this much of the device's global memory free: OpenCL has no portable query for
# free memory (only vendor extensions), so the plan assumes the whole global memory is ours and
# leaves room for what it does not count: the driver's own allocations, other programs on a
# shared GPU (a desktop's compositor), compiled kernels, and the activation scratch buffers
# (a few MiB for a 512-token batch of a small model; tens of MiB with experts, whose scratch holds
# every token's chosen experts' projections: gpu/device_layer_ops.h MoeBuffers).
AUTO_MARGIN_FRACTION = 0.10
AUTO_MARGIN_MIN_BYTES = 256 * MIB

# GGUF names every per-layer tensor "blk.<layer>.<kind>..." (native/src/model/tensor_names.cpp).
_LAYER_PREFIX = re.compile(r"blk\.(\d+)\.")


class PlacementError(EdgeInferError):
    """A gpu_layers / device request that cannot be met (bad syntax, a layer that does not exist,
    no device with require_gpu). `param` is the `Model.load` keyword at fault; the message is a
    `Wording` naming the settings, so the command line can print it with its flags."""

    def __init__(self, message: Wording, param: str):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class GpuLayers:
    """A parsed gpu_layers value: kind is "count", "all", "auto" or "list"."""
    kind: str
    count: int = 0
    layers: tuple[int, ...] = ()
    text: str = ""

    @property
    def wants_gpu(self) -> bool:
        return not (self.kind == "count" and self.count == 0)

    @property
    def ref(self) -> Ref:
        """This request, for a message: a count as the int it is, anything else as its text."""
        return Ref("gpu_layers", self.count if self.kind == "count" else self.text)


def parse_gpu_layers(text: str) -> GpuLayers:
    """'0', '4', 'all', 'auto' or a list of layers and inclusive ranges ('0-5,12')."""
    t = text.strip().lower()
    if t in ("all", "auto"):
        return GpuLayers(kind=t, text=t)
    if re.fullmatch(r"\d+", t):
        return GpuLayers(kind="count", count=int(t), text=t)
    layers: set[int] = set()
    for part in t.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m:
            raise PlacementError(Wording(Ref("gpu_layers"), f": {text!r} is not a number, 'all', 'auto' or a "
                                         "list of layers such as 0-5,12"), "gpu_layers")
        first, last = int(m.group(1)), int(m.group(2) if m.group(2) is not None else m.group(1))
        if last < first:
            raise PlacementError(Wording(Ref("gpu_layers"), f": the range {first}-{last} runs backwards"),
                                 "gpu_layers")
        layers.update(range(first, last + 1))
    return GpuLayers(kind="list", layers=tuple(sorted(layers)), text=t)


@dataclass
class LayerCost:
    """What one repeating layer needs on a device."""
    index: int
    weight_bytes: int = 0
    kv_bytes: int = 0
    largest_tensor_bytes: int = 0
    weight_types: set[str] = field(default_factory=set)
    shortconv: bool = False  # a short convolution instead of attention (LFM2's shortconv.* tensors)
    selection_bias: bool = False  # experts chosen with a selection bias (LFM2-MoE's exp_probs_b)

    @property
    def bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes


@dataclass
class ModelCosts:
    """Per-layer costs of a model at a context size, plus what never leaves the CPU."""
    layers: list[LayerCost]
    other_weight_bytes: int  # embeddings, output norm and matrix, rope factors
    n_ctx: int
    kv_types: tuple[str, str]

    @property
    def n_layer(self) -> int:
        return len(self.layers)


def model_costs(tensors: Iterable[dict], n_layer: int, n_ctx: int, kv_bytes_per_position: int,
                kv_types: tuple[str, str], kv_bytes_per_layer: int = 0, conv_state_bytes: int = 0) -> ModelCosts:
    """Costs from a GGUF tensor table (dicts with name, type_name, nbytes). kv_bytes_per_position:
    one layer's K and V bytes for one position in the cache types `kv_types`; kv_bytes_per_layer:
    what a layer's cache holds besides its rows (a centered cache's F16 sink rows and means);
    conv_state_bytes: what a short-convolution layer keeps instead (its recurrent state: no K/V
    rows are written for it, on the CPU or on a device)."""
    layers = [LayerCost(i) for i in range(n_layer)]
    other = 0
    for t in tensors:
        m = _LAYER_PREFIX.match(t["name"])
        nbytes = int(t["nbytes"])
        if not m or int(m.group(1)) >= n_layer:
            other += nbytes
            continue
        layer = layers[int(m.group(1))]
        layer.weight_bytes += nbytes
        layer.largest_tensor_bytes = max(layer.largest_tensor_bytes, nbytes)
        layer.weight_types.add(t["type_name"])
        layer.shortconv = layer.shortconv or ".shortconv." in t["name"]
        layer.selection_bias = layer.selection_bias or ".exp_probs_b." in t["name"]
    for layer in layers:
        layer.kv_bytes = conv_state_bytes if layer.shortconv else n_ctx * kv_bytes_per_position + kv_bytes_per_layer
    return ModelCosts(layers=layers, other_weight_bytes=other, n_ctx=n_ctx, kv_types=kv_types)


@dataclass
class Placement:
    """Where every layer runs, what that costs on each side, and why."""
    gpu_layers: tuple[int, ...]
    n_layer: int
    device: dict | None           # the device's entry from _core.opencl_devices(), if used
    device_index: int | None
    gpu_weight_bytes: int = 0
    gpu_kv_bytes: int = 0
    cpu_weight_bytes: int = 0
    cpu_kv_bytes: int = 0
    notes: list[str] = field(default_factory=list)  # the explanation, one sentence each (Wordings)

    @property
    def ranges(self) -> list[tuple[int, int]]:
        """Contiguous offloaded ranges (first, last), ascending."""
        out: list[tuple[int, int]] = []
        for i in self.gpu_layers:
            if out and out[-1][1] == i - 1:
                out[-1] = (out[-1][0], i)
            else:
                out.append((i, i))
        return out

    def as_dict(self, spell: Spelling = keyword_spelling) -> dict:
        """The plan as plain data, the notes worded by `spell`."""
        return {
            "gpu_layers": list(self.gpu_layers), "ranges": [list(r) for r in self.ranges],
            "n_layer": self.n_layer, "device_index": self.device_index,
            "device": self.device["name"] if self.device else None,
            "gpu_weight_bytes": self.gpu_weight_bytes, "gpu_kv_bytes": self.gpu_kv_bytes,
            "cpu_weight_bytes": self.cpu_weight_bytes, "cpu_kv_bytes": self.cpu_kv_bytes,
            "notes": [spelled(note, spell) for note in self.notes],
        }


def format_layers(layers: Iterable[int]) -> str:
    """(0, 1, 2, 5) -> '0-2,5'; () -> 'none'."""
    layers = sorted(layers)
    if not layers:
        return "none"
    parts, start, prev = [], layers[0], layers[0]
    for i in layers[1:] + [None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ",".join(parts)


def _mib(n: int) -> str:
    return f"{n / MIB:.1f} MiB" if n < GIB else f"{n / GIB:.2f} GiB"


def auto_budget(device: dict) -> int:
    """Bytes `auto` may fill on the device: global memory less the margin."""
    total = int(device["global_mem_bytes"])
    return max(0, total - max(int(total * AUTO_MARGIN_FRACTION), AUTO_MARGIN_MIN_BYTES))


def _refusal(layer: LayerCost, device: dict, matmul_types: set[str]) -> str | None:
    """Why `layer` cannot go to the device, or None if it can."""
    if layer.selection_bias:  # the device routes by softmax (gpu/kernels/moe.cl), not LFM2-MoE's sigmoid
        return "LFM2-MoE's sigmoid routing has no OpenCL path yet"
    # 1-D tensors (norm weights) are F32 and read directly; every other type needs a matmul kernel.
    missing = sorted(t for t in layer.weight_types if t not in matmul_types)
    if missing:
        return f"{', '.join(missing)} weights have no OpenCL kernel yet"
    if layer.largest_tensor_bytes > int(device["max_alloc_bytes"]):
        return (f"a {_mib(layer.largest_tensor_bytes)} tensor is over the device's largest allocation "
                f"({_mib(int(device['max_alloc_bytes']))})")
    return None


def plan_placement(costs: ModelCosts, request: GpuLayers, devices: list[dict], device_index: int,
                   matmul_types: Iterable[str], no_device_reason: str = "",
                   require_gpu: bool = False) -> Placement:
    """The plan for `request` on device `device_index` of `devices` (as _core.opencl_devices lists them).

    No device while offload is requested: a CPU-only plan whose notes say why, or PlacementError
    with require_gpu. A layer list naming a layer the model lacks, or a device index that does not
    exist, is a PlacementError."""
    n = costs.n_layer
    total_weights = sum(l.weight_bytes for l in costs.layers)
    total_kv = sum(l.kv_bytes for l in costs.layers)
    cpu_only = Placement(gpu_layers=(), n_layer=n, device=None, device_index=None,
                         cpu_weight_bytes=total_weights + costs.other_weight_bytes, cpu_kv_bytes=total_kv)
    if request.kind == "list":
        bad = [i for i in request.layers if i >= n]
        if bad:
            raise PlacementError(Wording(Ref("gpu_layers"), f": layer {bad[0]} does not exist (the model has "
                                         f"{n} layers: 0-{n - 1})"), "gpu_layers")
    if not request.wants_gpu:
        cpu_only.notes.append(Wording(request.ref, ": every layer runs on the CPU."))
        return cpu_only
    if not devices:
        why = ("offload requested (", request.ref, f") but {no_device_reason or 'no OpenCL device'}")
        if require_gpu:
            raise PlacementError(Wording(*why), "require_gpu")
        cpu_only.notes.append(Wording(*why, "; running on the CPU."))
        return cpu_only
    if not 0 <= device_index < len(devices):
        raise PlacementError(Wording(Ref("device", device_index),
                                     f": there {'is' if len(devices) == 1 else 'are'} {len(devices)} OpenCL "
                                     f"device{'' if len(devices) == 1 else 's'} (0-{len(devices) - 1}; see ",
                                     DEVICE_LIST, ")"), "device")
    device = devices[device_index]
    types = set(matmul_types)
    notes: list[str] = []

    if request.kind == "list":
        wanted = list(request.layers)
    elif request.kind == "all" or (request.kind == "count" and request.count >= n):
        wanted = list(range(n))
    elif request.kind == "count":
        wanted = list(range(n - request.count, n))
    else:
        wanted = list(range(n))  # auto: from the last layer backwards until the budget is spent

    chosen: list[int] = []
    refused: dict[str, list[int]] = {}
    for i in wanted:
        why = _refusal(costs.layers[i], device, types)
        if why:
            refused.setdefault(why, []).append(i)
        else:
            chosen.append(i)
    for why, layers in refused.items():
        notes.append(f"layers {format_layers(layers)} stay on the CPU: {why}.")

    if request.kind == "auto":
        budget = auto_budget(device)
        used, fitted = 0, []
        for i in reversed(chosen):
            if used + costs.layers[i].bytes > budget:
                break
            used += costs.layers[i].bytes
            fitted.append(i)
        per_layer = max((costs.layers[i].bytes for i in chosen), default=0)
        notes.append(
            f"auto: '{device['name']}' has {_mib(int(device['global_mem_bytes']))}; keeping "
            f"{AUTO_MARGIN_FRACTION:.0%} (at least {_mib(AUTO_MARGIN_MIN_BYTES)}) free leaves {_mib(budget)}; "
            f"a layer needs up to {_mib(per_layer)} (weights + KV at {costs.n_ctx} tokens), so "
            f"{len(fitted)} of {len(chosen)} offloadable layers fit ({_mib(used)}).")
        chosen = sorted(fitted)
    else:
        need = sum(costs.layers[i].bytes for i in chosen)
        if need > int(device["global_mem_bytes"]):
            raise PlacementError(Wording(
                request.ref, f": layers {format_layers(chosen)} need {_mib(need)} (weights + KV at "
                f"{costs.n_ctx} tokens), more than '{device['name']}' has ({_mib(int(device['global_mem_bytes']))}); "
                "try ", Ref("gpu_layers", "auto"), " or a smaller ", Ref("n_ctx")), "gpu_layers")

    gpu = set(chosen)
    plan = Placement(gpu_layers=tuple(sorted(gpu)), n_layer=n, device=device, device_index=device_index,
                     notes=notes)
    for layer in costs.layers:
        if layer.index in gpu:
            plan.gpu_weight_bytes += layer.weight_bytes
            plan.gpu_kv_bytes += layer.kv_bytes
        else:
            plan.cpu_weight_bytes += layer.weight_bytes
            plan.cpu_kv_bytes += layer.kv_bytes
    plan.cpu_weight_bytes += costs.other_weight_bytes
    if plan.gpu_layers:
        # engine/context.h: the host cache keeps a copy of the device rows for snapshots, saved
        # states and context shift, so host memory holds every layer's KV for now.
        plan.notes.append(f"the host KV cache also holds a staging copy of the offloaded layers' rows "
                          f"({_mib(plan.gpu_kv_bytes)}), used for snapshots, saved states and context shift.")
    return plan


def describe(plan: Placement, kv_types: tuple[str, str], spell: Spelling = keyword_spelling) -> list[str]:
    """One line per device (and the CPU), then the notes worded by `spell`: what `info` and the
    loader print."""
    kv = kv_types[0] if kv_types[0] == kv_types[1] else f"{kv_types[0]}/{kv_types[1]}"
    lines = []
    if plan.device is not None:
        lines.append(
            f"OpenCL device {plan.device_index} ({plan.device['name']}): layers {format_layers(plan.gpu_layers)} "
            f"({len(plan.gpu_layers)} of {plan.n_layer}), weights {_mib(plan.gpu_weight_bytes)}, "
            f"KV {kv} {_mib(plan.gpu_kv_bytes)}")
    cpu_layers = [i for i in range(plan.n_layer) if i not in set(plan.gpu_layers)]
    lines.append(
        f"CPU: layers {format_layers(cpu_layers)} ({len(cpu_layers)} of {plan.n_layer}) + embeddings and "
        f"output, weights {_mib(plan.cpu_weight_bytes)}, KV {kv} {_mib(plan.cpu_kv_bytes)}")
    return lines + [spelled(note, spell) for note in plan.notes]
