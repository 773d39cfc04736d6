"""``edgeinfer info``: what is inside a model file, from its GGUF metadata and tensor table; with
``--gpu-layers`` also the OpenCL placement plan (which layers where, bytes of weights and KV per
device), computed without loading the model."""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from typing import Any

from rich.markup import escape
from rich.table import Table

from edgeinfer import _core
from edgeinfer.cli.output import human_bytes, stderr, stdout
from edgeinfer.cli.pull import RichReporter
from edgeinfer.errors import EdgeInferError
from edgeinfer.gpu.placement import (Placement, describe, model_costs,
                                     parse_gpu_layers, plan_placement)
from edgeinfer.pull import resolve_model


def _params(n: int) -> str:
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.1f}{unit} ({n:,})"
    return str(n)


def summarize(gguf: Any) -> dict:
    """The facts ``info`` prints, as plain data (also what ``--json`` prints).

    Only the file's metadata and tensor table are read (no weights, no vocabulary build), so this
    is instant and works for files this version cannot run yet."""
    arch = gguf.get("general.architecture")
    mix: dict[str, dict[str, int]] = defaultdict(lambda: {"tensors": 0, "bytes": 0})
    n_params = 0
    for t in gguf.tensors():
        mix[t["type_name"]]["tensors"] += 1
        mix[t["type_name"]]["bytes"] += int(t["nbytes"])
        count = 1
        for dim in t["shape"]:
            count *= int(dim)
        n_params += count
    n_tokens = gguf.array_size("tokenizer.ggml.tokens")
    kv = kv_bytes_per_token(gguf, arch)
    return {
        "path": gguf.path,
        "file_size": int(gguf.file_size),
        "architecture": arch,
        "supported": arch in _core.supported_architectures(),
        "name": gguf.get("general.name"),
        "parameters": n_params,
        "context_length": gguf.get(f"{arch}.context_length"),
        "quantization": dict(sorted(mix.items(), key=lambda kv: -kv[1]["bytes"])),
        "tokenizer": {
            "model": gguf.get("tokenizer.ggml.model"),
            "pre": gguf.get("tokenizer.ggml.pre"),
            "vocab_size": n_tokens if n_tokens >= 0 else None,
        },
        "chat_template": gguf.get("tokenizer.chat_template") is not None,
        "kv_bytes_per_token": kv,
        "isa": _core.isa(),
    }


# Bytes per value of each KV cache type (block bytes / block size).
KV_TYPE_BYTES = {"f16": (2, 1), "q8_0": (34, 32), "q4_0": (18, 32)}


def kv_dims(gguf: Any, arch: str | None) -> tuple[int, int, int] | None:
    """(n_layer, k_dim, v_dim): layers and K / V values per position and layer, from the
    hyper-parameters; None if the file lacks them."""
    def key(name: str, default: Any = None) -> Any:
        value = gguf.get(f"{arch}.{name}")
        return default if value is None else value
    n_layer, n_embd, n_head = key("block_count"), key("embedding_length"), key("attention.head_count")
    if not (arch and n_layer and n_embd and n_head):
        return None
    n_head_kv = key("attention.head_count_kv", n_head)
    if isinstance(n_head_kv, list):   # per-layer counts
        n_head_kv = max(n_head_kv)
    k_dim = key("attention.key_length", n_embd // n_head) * n_head_kv
    v_dim = key("attention.value_length", n_embd // n_head) * n_head_kv
    return int(n_layer), int(k_dim), int(v_dim)


def _kv_row_bytes(kv_type: str, dim: int) -> int | None:
    block_bytes, block = KV_TYPE_BYTES[kv_type]
    return dim // block * block_bytes if dim % block == 0 else None


def kv_bytes_per_token(gguf: Any, arch: str | None) -> dict[str, int] | None:
    """KV cache bytes per token for each cache type (K and V of the same type), from the
    hyper-parameters; None if the file lacks them."""
    dims = kv_dims(gguf, arch)
    if dims is None:
        return None
    n_layer, k_dim, v_dim = dims
    out = {}
    for name in KV_TYPE_BYTES:
        k, v = _kv_row_bytes(name, k_dim), _kv_row_bytes(name, v_dim)
        if k is not None and v is not None:
            out[name] = n_layer * (k + v)
    return out


def placement(gguf: Any, args: argparse.Namespace) -> Placement:
    """The OpenCL placement plan for --gpu-layers / --device / -c / --ctk / --ctv (no loading)."""
    from edgeinfer.cli.devices import list_devices  # the one device listing (honours EDGEINFER_OPENCL_LIBRARY)

    arch = gguf.get("general.architecture")
    dims = kv_dims(gguf, arch)
    if dims is None:
        raise EdgeInferError(f"{gguf.path}: no layer count / attention sizes in the metadata, so no placement plan")
    n_layer, k_dim, v_dim = dims
    k_row, v_row = _kv_row_bytes(args.cache_type_k, k_dim), _kv_row_bytes(args.cache_type_v, v_dim)
    if k_row is None or v_row is None:
        raise EdgeInferError(f"KV rows of {k_dim}/{v_dim} values do not fit {args.cache_type_k}/{args.cache_type_v} blocks")
    kv_types = (args.cache_type_k, args.cache_type_v)
    costs = model_costs(gguf.tensors(), n_layer, args.ctx_size, k_row + v_row, kv_types)
    request = parse_gpu_layers(args.gpu_layers)
    devices, reason = list_devices() if request.wants_gpu else ([], "")
    return plan_placement(costs, request, devices, args.device, _core.opencl_matmul_types(),
                          no_device_reason=reason, require_gpu=args.require_gpu)


def render(info: dict) -> Table:
    """``summarize``'s dict as a two-column table."""
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    tok = info["tokenizer"]
    tokenizer = f"{tok['model']} (pre: {tok['pre'] or '-'})"
    if tok["vocab_size"] is not None:
        tokenizer += f", {tok['vocab_size']:,} tokens"
    quant = "\n".join(f"{name}: {q['tensors']} tensors, {human_bytes(q['bytes'])}"
                      for name, q in info["quantization"].items())
    rows = [
        ("file", f"{info['path']} ({human_bytes(info['file_size'])})"),
        ("name", info["name"] or "-"),
        ("architecture", f"{info['architecture']}"
                         + ("" if info["supported"] else " (not supported by this version)")),
        ("parameters", _params(info["parameters"])),
        ("context length", str(info["context_length"])),
        ("tensor types", quant),
        ("tokenizer", tokenizer),
        ("chat template", "yes" if info["chat_template"] else "no"),
        ("KV cache per token", _kv_text(info)),
        ("native ISA", info["isa"]),
    ]
    for key, value in rows:
        table.add_row(key, escape(str(value)))
    return table


def _kv_text(info: dict) -> str:
    kv, n_ctx = info.get("kv_bytes_per_token"), info.get("context_length")
    if not kv:
        return "-"
    return "\n".join(f"{name}: {human_bytes(b)}" + (f" ({human_bytes(b * n_ctx)} at {n_ctx:,} tokens)" if n_ctx else "")
                     for name, b in kv.items())


def main(args: argparse.Namespace) -> int:
    """Read the model's metadata and print the summary (and the placement plan if asked)."""
    gguf = _core.GgufFile(str(resolve_model(args.model, reporter=RichReporter(stderr))))
    info = summarize(gguf)
    plan = None
    if getattr(args, "gpu_layers", None) is not None:
        plan = placement(gguf, args)
        kv_types = (args.cache_type_k, args.cache_type_v)
        info["placement"] = dict(plan.as_dict(), n_ctx=args.ctx_size, kv_types=list(kv_types),
                                 lines=describe(plan, kv_types))
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    stdout.print(render(info))
    if plan is not None:
        stdout.print(f"[bold]placement[/bold] (--gpu-layers {escape(args.gpu_layers)}, "
                     f"context {args.ctx_size:,})")
        for line in info["placement"]["lines"]:
            stdout.print("  " + escape(line), soft_wrap=True)
    return 0
