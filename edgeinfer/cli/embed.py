"""``edgeinfer embed MODEL [TEXT ...] [-f FILE]``: one JSON line per text, {"index", "embedding"}, in
the order given (`Model.embed` batches them)."""
from __future__ import annotations

import argparse
import json
import sys

from edgeinfer.cli.output import stderr, warnings_on_stderr
from edgeinfer.cli.pull import RichReporter
from edgeinfer.model import Model
from edgeinfer.pull import resolve_model


def read_lines(texts: list[str], file: str | None, what: str) -> list[str]:
    """The arguments, else the non-empty lines of FILE ('-' or nothing: stdin)."""
    if texts:
        return texts
    if file in (None, "-"):
        lines = sys.stdin.read().splitlines()
    else:
        with open(file, encoding="utf-8") as f:
            lines = f.read().splitlines()
    lines = [line for line in lines if line.strip()]
    if not lines:
        raise ValueError(f"no {what}: give them as arguments or one per line with -f FILE")
    return lines


def load(args: argparse.Namespace, **options) -> Model:
    path = resolve_model(args.model, reporter=RichReporter(stderr))
    with warnings_on_stderr():
        return Model.load(path, n_ctx=args.ctx_size, n_threads=args.threads, **options)


def main(args: argparse.Namespace) -> int:
    texts = read_lines(args.texts, args.file, "texts to embed")
    model = load(args, embeddings=True, pooling=args.pooling)
    vectors = model.embed(texts, normalize=not args.no_normalize, truncate=args.truncate)
    for i, vector in enumerate(vectors):
        sys.stdout.write(json.dumps({"index": i, "embedding": [float(x) for x in vector]}) + "\n")
    return 0
