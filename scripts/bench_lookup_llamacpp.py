#!/usr/bin/env python3
"""llama.cpp's prompt lookup (`llama-lookup`) on the grounded prompts bench_speculative.py uses, so
the two speed-ups can be read side by side.

    python scripts/bench_lookup_llamacpp.py LLAMA_LOOKUP [MODEL ...] [-t 2] [--max-tokens 160]

For each prompt (rendered with the model's chat template by edgeinfer, so both engines see the
same text), `llama-lookup` runs greedy twice: drafting up to --draft tokens, and with drafts of
0 tokens (the same program decoding one token per call: plain decoding). The speed-up is the
ratio of their decode speeds ("decoded N tokens in T seconds"); acceptance is the program's own.
The better of --rounds runs of each is kept. Reports the median speed-up per category.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edgeinfer.machine import cpu_name  # noqa: E402
from edgeinfer.model import Model  # noqa: E402
from edgeinfer.pull import resolve_model  # noqa: E402

PROMPTS = Path(__file__).resolve().parent / "data" / "grounded_prompts.json"
DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
ACCEPT = re.compile(r"n_drafted\s*=\s*(\d+).*?n_accept\s*=\s*(\d+)", re.S)


def run_lookup(binary: Path, model: str, text: str, draft: int, max_tokens: int, threads: int) -> dict:
    argv = [str(binary), "-m", model, "-p", text, "-n", str(max_tokens), "--temp", "0", "-t", str(threads),
            "-tb", str(threads), "-c", "4096", "--spec-draft-n-max", str(draft)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    log = out.stdout + out.stderr
    m = DECODED.search(log)
    if out.returncode != 0 or m is None:
        raise SystemExit(f"llama-lookup failed ({out.returncode}):\n{log[-2000:]}")
    a = ACCEPT.search(log)
    return {"tokens": int(m.group(1)), "seconds": float(m.group(2)),
            "drafted": int(a.group(1)) if a else 0, "accepted": int(a.group(2)) if a else 0}


def measure(binary: Path, path: str, prompts: dict, args: argparse.Namespace) -> dict:
    model = Model.load(path, n_ctx=2048, n_threads=args.threads)
    out: dict = {"model": Path(path).name, "categories": {}}
    for category, texts in prompts.items():
        rows = []
        for text in texts:
            rendered = model.chat_prompt([{"role": "user", "content": text}]).text
            plain = min((run_lookup(binary, path, rendered, 0, args.max_tokens, args.threads)
                         for _ in range(args.rounds)), key=lambda r: r["seconds"] / max(r["tokens"], 1))
            look = min((run_lookup(binary, path, rendered, args.draft, args.max_tokens, args.threads)
                        for _ in range(args.rounds)), key=lambda r: r["seconds"] / max(r["tokens"], 1))
            rows.append({"speedup": (plain["seconds"] / plain["tokens"]) / (look["seconds"] / look["tokens"]),
                         "drafted": look["drafted"], "accepted": look["accepted"]})
        drafted = sum(r["drafted"] for r in rows)
        out["categories"][category] = {
            "median_speedup": statistics.median(r["speedup"] for r in rows),
            "min_speedup": min(r["speedup"] for r in rows),
            "acceptance": sum(r["accepted"] for r in rows) / drafted if drafted else 0.0,
        }
        c = out["categories"][category]
        print(f"  {category:10s} {c['median_speedup']:.2f}x (min {c['min_speedup']:.2f}), "
              f"{100 * c['acceptance']:.0f} % of guesses accepted", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("llama_lookup", type=Path, help="the llama-lookup binary")
    ap.add_argument("model", nargs="*", default=["smollm2-135m-instruct", "gemma-3-270m-it"])
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--draft", type=int, default=8, help="most tokens a draft holds (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--categories", help="only these categories (comma-separated; default: all)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    prompts = {k: v for k, v in json.loads(PROMPTS.read_text()).items() if k != "about"}
    if args.categories:
        prompts = {k: v for k, v in prompts.items() if k in args.categories.split(",")}
    print(f"{cpu_name()}, {args.threads} threads, llama-lookup {args.llama_lookup}", flush=True)
    results = []
    for name in args.model:
        path = str(resolve_model(name))
        print(Path(path).name, flush=True)
        results.append(measure(args.llama_lookup, path, prompts, args))
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
