"""``edgeinfer rerank MODEL QUERY [DOC ...] [-f FILE]``: one JSON line per document, best first,
{"index", "score", "document"}, scored by a reranker's classification head."""
from __future__ import annotations

import argparse
import json
import sys

from edgeinfer.cli.embed import load, read_lines


def main(args: argparse.Namespace) -> int:
    indices, documents = read_lines(args.documents, args.file, "documents to score")
    model = load(args)
    scores = model.rerank(args.query, documents, truncate=args.truncate)
    order = sorted(range(len(documents)), key=lambda i: -float(scores[i]))[:args.top_n or len(documents)]
    for i in order:
        sys.stdout.write(json.dumps({"index": indices[i], "score": float(scores[i]), "document": documents[i]}) + "\n")
    return 0
