"""Embeddings per second for a batch of short texts: edgeinfer's Model.embed against llama.cpp's
llama-embedding on the same GGUF file, same threads, side by side (alternating rounds).

Without --model it builds a BERT with bge-small-en-v1.5's shapes (12 layers of 384, 12 heads,
FFN 1536, a 30,522-token WordPiece vocabulary, mean pooling) and random weights, converted by
`edgeinfer convert` (speed depends on the shapes, not on the weights' values).

llama.cpp's figure is the time from its first batch_decode log line to its context's teardown (its
log's own timestamps: the decodes and the printing of the vectors), so neither side counts
loading; edgeinfer's is the wall time of one embed() call over all texts.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from edgeinfer import Model  # noqa: E402
from edgeinfer.machine import machine_summary  # noqa: E402

WORDS = ("local model answers questions about notes code documents quickly search index meeting project "
         "garden recipe travel budget invoice report draft email summary weather music library").split()
# llama.cpp's log lines start with minutes.seconds.milliseconds.microseconds since start.
STAMP = re.compile(r"^(\d+)\.(\d{2})\.(\d{3})\.(\d{3}) ", re.M)


def bge_small_like(folder: Path) -> Path:
    """A random-weight BERT with bge-small's shapes, as a sentence-transformers folder, converted."""
    import torch
    import transformers

    vocab = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab += [chr(c) for c in range(33, 127) if not chr(c).isupper()] + WORDS
    rng = np.random.default_rng(0)
    letters = list("abcdefghijklmnopqrstuvwxyz")
    seen = set(vocab)
    while len(vocab) < 30522:
        piece = "".join(rng.choice(letters, size=int(rng.integers(2, 8))))
        piece = piece if rng.random() < 0.6 else "##" + piece
        if piece not in seen:
            seen.add(piece)
            vocab.append(piece)
    hf = folder / "hf"
    hf.mkdir(parents=True, exist_ok=True)
    (hf / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    transformers.BertTokenizerFast(vocab=str(hf / "vocab.txt"), do_lower_case=True).save_pretrained(hf)
    config = transformers.BertConfig(vocab_size=len(vocab), hidden_size=384, num_hidden_layers=12,
                                     num_attention_heads=12, intermediate_size=1536, max_position_embeddings=512)
    torch.manual_seed(0)
    transformers.BertModel(config).eval().save_pretrained(hf, safe_serialization=True)
    (hf / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (hf / "1_Pooling").mkdir(exist_ok=True)
    (hf / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 384,
                                                             "pooling_mode_mean_tokens": True}))
    out = folder / "bge-small-like.F16.gguf"
    subprocess.run([sys.executable, "-m", "edgeinfer", "convert", str(hf), str(out), "--outtype", "f16", "--force"],
                   check=True, cwd=ROOT)
    return out


def texts(n: int) -> list[str]:
    rng = np.random.default_rng(1)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(8, 21)))) for _ in range(n)]


def run_edgeinfer(model: Model, batch: list[str]) -> float:
    start = time.perf_counter()
    model.embed(batch)
    return len(batch) / (time.perf_counter() - start)


def _seconds(match: re.Match) -> float:
    m, s, ms, us = (int(g) for g in match.groups())
    return m * 60 + s + ms / 1e3 + us / 1e6


def run_llamacpp(binary: str, path: Path, text_file: Path, threads: int, n: int) -> float:
    out = subprocess.run([binary, "-m", str(path), "-f", str(text_file), "-t", str(threads), "-c", "512",
                          "-b", "2048", "-ub", "2048", "--pooling", "mean", "--embd-normalize", "2",
                          "--embd-output-format", "array", "-ngl", "0"],
                         capture_output=True, text=True, check=True)
    log = out.stderr
    start = next((m for m in STAMP.finditer(log) if log[m.end():].startswith("I batch_decode")), None)
    end = next((m for m in STAMP.finditer(log) if "~llama_context" in log[m.end():m.end() + 40]), None)
    if start is None or end is None:
        raise RuntimeError(f"no batch_decode / teardown lines in llama-embedding's log:\n{log[-2000:]}")
    return n / (_seconds(end) - _seconds(start))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, help="an embedding GGUF (default: build a bge-small-like one)")
    p.add_argument("-n", type=int, default=256, help="texts per batch (default: %(default)s)")
    p.add_argument("-t", "--threads", type=int, action="append", help="threads (repeatable; default 1 and 2)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--llama-embedding", required=True, help="llama.cpp's llama-embedding binary")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or bge_small_like(Path(tmp))
        batch = texts(args.n)
        text_file = Path(tmp) / "texts.txt"
        text_file.write_text("\n".join(batch) + "\n")
        print(f"machine: {machine_summary()}")
        print(f"| file | threads | texts | edgeinfer emb/s (median) | llama.cpp emb/s (median) | ratio |")
        print("|---|---|---|---|---|---|")
        for threads in args.threads or [1, 2]:
            model = Model.load(path, n_ctx=512, n_threads=threads)
            model.embed(batch[:8])   # warm-up
            ours, theirs = [], []
            for _ in range(args.rounds):
                ours.append(run_edgeinfer(model, batch))
                theirs.append(run_llamacpp(args.llama_embedding, path, text_file, threads, args.n))
            a, b = statistics.median(ours), statistics.median(theirs)
            print(f"| {path.name} | {threads} | {args.n} | {a:.1f} | {b:.1f} | **{a / b:.2f}** |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
