"""``edgeinfer embed MODEL [TEXT ...] [-f FILE]``: one JSON line per text, {"index", "embedding"}, in
the order given (`Model.embed` batches them)."""
from __future__ import annotations

import argparse
import json
import sys

from edgeinfer.cli.files import read_text_file
from edgeinfer.cli.output import stderr, warnings_on_stderr
from edgeinfer.cli.pull import RichReporter
from edgeinfer.errors import EdgeInferError
from edgeinfer.model import Model
from edgeinfer.pull import resolve_model


def read_lines(texts: list[str], file: str | None, what: str) -> tuple[list[int], list[str]]:
    """(indices, texts): the arguments numbered from 0, else the non-blank lines of FILE ('-' or
    nothing: stdin) numbered by their line, from 0. A blank line is skipped but keeps its number,
    so each result's index says which line of the file it is for (the server's index is the
    input's position too)."""
    if texts:
        return list(range(len(texts))), texts
    lines = read_text_file(file or "-").splitlines()
    numbered = [(i, line) for i, line in enumerate(lines) if line.strip()]
    if not numbered:
        raise ValueError(f"no {what}: give them as arguments or one per line with -f FILE")
    return [i for i, _ in numbered], [line for _, line in numbered]


def load(args: argparse.Namespace, **options) -> Model:
    path = resolve_model(args.model, reporter=RichReporter(stderr))
    with warnings_on_stderr():
        return Model.load(path, n_ctx=args.ctx_size, n_threads=args.threads, **options)


def check_pooled(model: Model, requested: str | None) -> None:
    """Refuses pooling "none": it gives a vector per token, not the one per text this command prints
    (the server refuses it too; the Python API's Model.embed returns the per-token vectors)."""
    if model.pooling == "none":
        why = ("--pooling none" if requested == "none"
               else f"{model.path.name} has no pooling (its file names none), so it")
        raise EdgeInferError(f"{why} gives a vector per token rather than one per text; give --pooling mean, "
                             "last or cls")


def main(args: argparse.Namespace) -> int:
    indices, texts = read_lines(args.texts, args.file, "texts to embed")
    model = load(args, embeddings=True, pooling=args.pooling)
    check_pooled(model, args.pooling)
    vectors = model.embed(texts, normalize=not args.no_normalize, truncate=args.truncate)
    for i, vector in zip(indices, vectors):
        sys.stdout.write(json.dumps({"index": i, "embedding": [float(x) for x in vector]}) + "\n")
    return 0
