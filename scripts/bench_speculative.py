#!/usr/bin/env python3
"""Speculative decoding (prompt lookup, or a draft model) against plain decoding on grounded prompts.

For each model and each prompt of scripts/data/grounded_prompts.json (code rewrites, summaries,
field extraction, and free-form chat as the control): a greedy chat answer generated plainly and
with `speculative=True`, each from an empty prompt cache, generation speed compared (the prompt's
own decode is not in it). The two answers must be the same tokens (the script fails otherwise).
Reports, per category, the median speed-up and the share of drafted tokens accepted. With
`--draft DRAFT`, the guesses come from that draft model (same vocabulary; its prompt cache is
emptied before each answer too) instead of prompt lookup. With `--temp T` the answers are sampled:
with `--seed S` they must still be the same tokens; without, they differ (a draft model's guesses
then go through the rejection rule), and the speed-up compares tokens per second.

    python scripts/bench_speculative.py [MODEL ...] [--draft DRAFT] [--temp 0] [--seed S] [-t 2]
                                        [--max-tokens 160] [--rounds 2] [--json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edgeinfer import _core  # noqa: E402
from edgeinfer.draft_model import DraftModel  # noqa: E402
from edgeinfer.machine import cpu_name  # noqa: E402
from edgeinfer.model import Model  # noqa: E402
from edgeinfer.pull import resolve_model  # noqa: E402

PROMPTS = Path(__file__).resolve().parent / "data" / "grounded_prompts.json"


def answer(model: Model, prompt: str, speculative: bool, max_tokens: int, sampling: dict,
           draft: DraftModel | None = None):
    for m in (model, draft.model) if draft is not None else (model,):
        m.prompt_cache.reset()            # both runs decode the whole prompt alike
        m.prompt_cache.clear_snapshots()
    gen = model.chat([{"role": "user", "content": prompt}], max_tokens=max_tokens, **sampling,
                     speculative=speculative, draft=draft if speculative else None)
    try:
        while True:
            next(gen)
    except StopIteration as stop:
        return stop.value


def measure(path: str, prompts: dict, n_threads: int, max_tokens: int, rounds: int, draft_path: str | None,
            sampling: dict) -> dict:
    model = Model.load(path, n_ctx=2048, n_threads=n_threads)
    draft = DraftModel(Model.load(draft_path, n_ctx=2048, n_threads=n_threads), model) if draft_path else None
    out: dict = {"model": Path(path).name, "draft": Path(draft_path).name if draft_path else None,
                 "isa": _core.isa(), "categories": {}}
    for category, texts in prompts.items():
        rows = []
        for text in texts:
            plain_speed, spec_speed, res = [], [], None
            for _ in range(rounds):   # alternate, keep the best of each
                plain = answer(model, text, False, max_tokens, sampling)
                spec = answer(model, text, True, max_tokens, sampling, draft)
                if spec.tokens != plain.tokens and (sampling["temperature"] == 0 or sampling["seed"] is not None):
                    raise SystemExit(f"{Path(path).name}: speculative answer differs from plain decoding for {text[:60]!r}")
                plain_speed.append(plain.timings.gen_tok_s)
                spec_speed.append(spec.timings.gen_tok_s)
                res = spec
            rows.append({"tokens": len(res.tokens), "speedup": max(spec_speed) / max(max(plain_speed), 1e-9),
                         "drafted": res.drafts.drafted, "accepted": res.drafts.accepted})
        drafted = sum(r["drafted"] for r in rows)
        out["categories"][category] = {
            "prompts": len(rows),
            "median_speedup": statistics.median(r["speedup"] for r in rows),
            "min_speedup": min(r["speedup"] for r in rows),
            "acceptance": sum(r["accepted"] for r in rows) / drafted if drafted else 0.0,
            "rows": rows,
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=["smollm2-135m-instruct", "gemma3-270m"])
    ap.add_argument("--draft", metavar="DRAFT", help="guess with this draft model instead of prompt lookup")
    ap.add_argument("--temp", type=float, default=0.0, help="temperature (default: 0, greedy)")
    ap.add_argument("--seed", type=int, default=None, help="seed of the sampled answers (default: none)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--categories", help="only these categories (comma-separated; default: all)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    data = json.loads(PROMPTS.read_text(encoding="utf-8"))
    prompts = {k: v for k, v in data.items() if isinstance(v, list)}
    if args.categories:
        prompts = {k: v for k, v in prompts.items() if k in args.categories.split(",")}
    draft = str(resolve_model(args.draft)) if args.draft else None
    sampling = {"temperature": args.temp, "seed": args.seed}
    results = [measure(str(resolve_model(m)), prompts, args.threads, args.max_tokens, args.rounds, draft, sampling)
               for m in args.models]
    if args.json:
        print(json.dumps({"cpu": cpu_name(), "threads": args.threads, "sampling": sampling, "results": results},
                         indent=2))
        return 0
    how = "greedy" if args.temp == 0 else f"temperature {args.temp:g}, seed {args.seed}"
    print(f"CPU: {cpu_name()}, {args.threads} threads, {how}, up to {args.max_tokens} tokens")
    for r in results:
        print(f"{r['model']} ({r['isa']})" + (f", draft model {r['draft']}" if r["draft"] else ", prompt lookup"))
        for category, c in r["categories"].items():
            print(f"  {category:<10} {c['prompts']:>2} prompts  speed-up median {c['median_speedup']:.2f}x "
                  f"(min {c['min_speedup']:.2f}x)  accepted {100 * c['acceptance']:.0f}% of drafted tokens")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
