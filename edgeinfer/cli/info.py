"""``edgeinfer info``: what is inside a model file, from its GGUF metadata and tensor table, and
whether it runs here (the loader's verdict); with ``--gpu-layers`` also the OpenCL placement plan
(which layers where, bytes of weights and KV per device), computed without loading the model."""
from __future__ import annotations

import argparse
import json
import os
from collections import defaultdict
from typing import Any

from rich.markup import escape
from rich.table import Table

from edgeinfer import _core
from edgeinfer.cli.output import human_bytes, stderr, stdout
from edgeinfer.cli.pull import RichReporter
from edgeinfer.cli.wording import flag_spelling
from edgeinfer.errors import EdgeInferError, ModelFormatError
from edgeinfer.gpu.model_plan import kv_bytes_per_token, plan_for_file
from edgeinfer.gpu.placement import Placement, describe
from edgeinfer.model import KV_CACHE_TYPES
from edgeinfer.pull import resolve_model


def _params(n: int) -> str:
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.1f}{unit} ({n:,})"
    return str(n)


def summarize(gguf: Any) -> dict:
    """The facts ``info`` prints, as plain data (also what ``--json`` prints).

    The facts are read from the file's metadata and tensor table only (no weights, no vocabulary
    build), so they show for files this version cannot run yet. When those say it can run, the
    loader has the last word (`load_error`): it alone knows every tensor an architecture needs.
    It checks without repacking the weights."""
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
    kv = kv_bytes_per_token(gguf, KV_CACHE_TYPES)
    runnable_types = set(_core.weight_types())
    # F32 norms and biases never need a dot product; every other type a tensor has must be one the
    # kernel set computes with (the loader refuses the file otherwise).
    unsupported_types = sorted(name for name in mix if name not in runnable_types and name != "f32")
    arch_supported = arch in _core.supported_architectures()
    tok_model, pre = gguf.get("tokenizer.ggml.model"), gguf.get("tokenizer.ggml.pre")
    # Only byte-level BPE vocabularies ("gpt2") are split by a pre-tokenizer; none named is "default".
    pre_supported = tok_model != "gpt2" or (pre or "default") in _core.supported_pre_tokenizers()
    settings_error = None
    if arch_supported:
        try:   # what the loader would refuse in the hyper-parameters (a RoPE scaling it lacks, ...)
            gguf.hparams()
        except ModelFormatError as e:
            settings_error = str(e)
    supported = arch_supported and not unsupported_types and settings_error is None and pre_supported
    load_error = _load_error(gguf.path) if supported else None
    return {
        "path": gguf.path,
        "file_size": int(gguf.file_size),  # of every part, for a split model
        "parts": len(gguf.parts),
        "architecture": arch,
        "supported": supported and load_error is None,
        "architecture_supported": arch_supported,
        "settings_error": settings_error,
        "load_error": load_error,
        "unsupported_types": unsupported_types,
        "name": gguf.get("general.name"),
        "parameters": n_params,
        "context_length": gguf.get(f"{arch}.context_length"),
        "experts": _experts(gguf, arch),
        "layer_kinds": _layer_kinds(gguf, arch),
        "quantization": dict(sorted(mix.items(), key=lambda kv: -kv[1]["bytes"])),
        "tokenizer": {
            "model": tok_model,
            "pre": pre,
            "pre_supported": pre_supported,
            "vocab_size": n_tokens if n_tokens >= 0 else None,
        },
        "chat_template": gguf.get("tokenizer.chat_template") is not None,
        "kv_bytes_per_token": kv,
        "isa": _core.isa(),
    }


def _load_error(path: str) -> str | None:
    """Why the loader refuses the file (a tensor missing or of the wrong shape, a vocabulary it
    cannot build, ...), or None when it loads."""
    try:
        _core.check_model(os.fsencode(path))   # bytes: a file name need not be UTF-8
    except EdgeInferError as e:
        return str(e)
    return None


def _experts(gguf: Any, arch: str) -> dict[str, int] | None:
    """A mixture-of-experts model's expert count, experts used per token and expert width (the
    file's keys); None for a dense model."""
    count = gguf.get(f"{arch}.expert_count")
    if not count:
        return None
    return {"count": int(count), "used": int(gguf.get(f"{arch}.expert_used_count") or 0),
            "feed_forward_length": int(gguf.get(f"{arch}.expert_feed_forward_length") or 0)}


def _layer_kinds(gguf: Any, arch: str) -> dict[str, int] | None:
    """Attention and short-convolution layers of a hybrid model (LFM2: head_count_kv per layer,
    0 for a convolution, whose state each sequence keeps); None when every layer attends."""
    counts = gguf.get(f"{arch}.attention.head_count_kv")
    if not isinstance(counts, list) or all(counts):
        return None
    return {"attention": sum(1 for c in counts if c), "short_convolution": sum(1 for c in counts if not c)}


def placement(gguf: Any, args: argparse.Namespace) -> Placement:
    """The OpenCL placement plan for --gpu-layers / --device / -c / --ctk / --ctv (no loading)."""
    return plan_for_file(gguf, args.gpu_layers, args.device, args.ctx_size,
                         (args.cache_type_k, args.cache_type_v), args.require_gpu)


def render(info: dict) -> Table:
    """``summarize``'s dict as a two-column table."""
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    tok = info["tokenizer"]
    tokenizer = f"{tok['model']} (pre: {tok['pre'] or '-'}"
    tokenizer += ")" if tok.get("pre_supported", True) else ", not supported by this version)"
    if tok["vocab_size"] is not None:
        tokenizer += f", {tok['vocab_size']:,} tokens"
    unsupported = set(info["unsupported_types"])
    quant = "\n".join(f"{name}: {q['tensors']} tensors, {human_bytes(q['bytes'])}"
                      + (" (no kernels for this type in this version)" if name in unsupported else "")
                      for name, q in info["quantization"].items())
    rows = [
        ("file", f"{info['path']} ({human_bytes(info['file_size'])}"
                 + (f" in {info['parts']} parts)" if info["parts"] > 1 else ")")),
        ("name", info["name"] or "-"),
        ("architecture", f"{info['architecture']}"
                         + ("" if info["architecture_supported"] else " (not supported by this version)")),
        ("parameters", _params(info["parameters"])),
        ("context length", str(info["context_length"])),
        *([("experts", _experts_text(info["experts"]))] if info["experts"] else []),
        *([("layers", _layer_kinds_text(info["layer_kinds"]))] if info.get("layer_kinds") else []),
        ("tensor types", quant),
        ("tokenizer", tokenizer),
        ("chat template", "yes" if info["chat_template"] else "no"),
        ("KV cache per token", _kv_text(info)),
        ("native ISA", info["isa"]),
        ("runs here", "yes" if info["supported"] else "no: " + _why_not(info)),
    ]
    for key, value in rows:
        table.add_row(key, escape(str(value)))
    return table


def _experts_text(experts: dict[str, int]) -> str:
    width = f", each {experts['feed_forward_length']:,} wide" if experts["feed_forward_length"] else ""
    return f"{experts['count']} ({experts['used']} used per token{width})"


def _layer_kinds_text(kinds: dict[str, int]) -> str:
    return (f"{kinds['attention']} attention, {kinds['short_convolution']} short convolution "
            "(a recurrent state per sequence: cached sequences continue from their end only)")


def _why_not(info: dict) -> str:
    reasons = []
    if not info["architecture_supported"]:
        reasons.append(f"architecture {info['architecture']!r} is not implemented")
    if info["unsupported_types"]:
        reasons.append("no kernels for " + ", ".join(info["unsupported_types"]))
    if info.get("settings_error"):
        reasons.append(info["settings_error"])
    if info.get("load_error"):
        reasons.append(info["load_error"])
    if not info["tokenizer"].get("pre_supported", True):
        reasons.append(f"pre-tokenizer {info['tokenizer']['pre']!r} is not implemented")
    return "; ".join(reasons)


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
        info["placement"] = dict(plan.as_dict(flag_spelling), n_ctx=args.ctx_size, kv_types=list(kv_types),
                                 lines=describe(plan, kv_types, flag_spelling))
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
