"""``edgeinfer info``: what is inside a model file, from its GGUF metadata and tensor table."""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from typing import Any

from rich.markup import escape
from rich.table import Table

from edgeinfer.cli.output import human_bytes, stdout
from edgeinfer.cli.run import load_model


def _params(n: int) -> str:
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.1f}{unit} ({n:,})"
    return str(n)


def summarize(model: Any) -> dict:
    """The facts ``info`` prints, as plain data (also what ``--json`` prints)."""
    meta = model.metadata
    arch = model.arch
    mix: dict[str, dict[str, int]] = defaultdict(lambda: {"tensors": 0, "bytes": 0})
    for t in model.tensor_infos:
        mix[t["type_name"]]["tensors"] += 1
        mix[t["type_name"]]["bytes"] += int(t["nbytes"])
    tokens = meta.get("tokenizer.ggml.tokens")
    return {
        "path": str(model.path),
        "file_size": int(model.file_size),
        "architecture": arch,
        "name": meta.get("general.name"),
        "parameters": int(model.n_params),
        "context_length": meta.get(f"{arch}.context_length", model.n_ctx_train),
        "quantization": dict(sorted(mix.items(), key=lambda kv: -kv[1]["bytes"])),
        "tokenizer": {
            "model": meta.get("tokenizer.ggml.model"),
            "pre": meta.get("tokenizer.ggml.pre"),
            "vocab_size": len(tokens) if tokens is not None else None,
        },
        "chat_template": "tokenizer.chat_template" in meta,
        "isa": model.isa,
    }


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
        ("architecture", info["architecture"]),
        ("parameters", _params(info["parameters"])),
        ("context length", str(info["context_length"])),
        ("tensor types", quant),
        ("tokenizer", tokenizer),
        ("chat template", "yes" if info["chat_template"] else "no"),
        ("native ISA", info["isa"]),
    ]
    for key, value in rows:
        table.add_row(key, escape(str(value)))
    return table


def main(args: argparse.Namespace) -> int:
    """Load the model's metadata and print the summary."""
    model, _ = load_model(args.model, n_ctx=512, n_threads=1)
    info = summarize(model)
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        stdout.print(render(info))
    return 0
