#!/usr/bin/env python3
"""How fast prompt lookup could make each answer at best, against what its drafting does.

For each prompt of scripts/data/grounded_prompts.json: the plain greedy chat answer is generated
once, the decode call of r rows (r = 1..MAX_DRAFT + 1, as speculation makes them) is timed at the
prompt's depth, and the generation is replayed on those costs three ways:

- `lookup`: edgeinfer's PromptLookup as it runs (its n-gram choice, its draft lengths from the
  costs and its running acceptance; the costs known from the start, as after a first answer);
- `oracle`: the same n-gram choice, but each draft cut to the guesses that will be accepted (no
  row spent on a wrong guess: what a perfect judge of when to stop guessing would get, near
  enough; it can trail `lookup` a little where a shorter draft is the better buy);
- `any match`: the longest right continuation of any earlier occurrence of the last 1-4 tokens
  (hindsight again: a bound for choosing among occurrences).

Speed-ups are plain decoding's cost over each replay's, per category median. The replay counts
decode calls only (no sampling or Python time), so `lookup` reads a little above what
bench_speculative.py measures.

    python scripts/lookup_ceiling.py [MODEL ...] [-t 2] [--max-tokens 160] [--categories code,chat]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_decode_batch import measure  # noqa: E402
from edgeinfer.machine import cpu_name  # noqa: E402
from edgeinfer.model import Model  # noqa: E402
from edgeinfer.pull import resolve_model  # noqa: E402
from edgeinfer.speculative import MAX_DRAFT, NGRAM_SIZES, NO_DRAFT, Draft, PromptLookup  # noqa: E402

PROMPTS = Path(__file__).resolve().parent / "data" / "grounded_prompts.json"


def call_costs(path: str, n_threads: int, depth: int) -> dict[int, float]:
    """Seconds of a decode call of r rows after `depth` cached tokens (bench_decode_batch's method)."""
    ms = measure(path, list(range(1, MAX_DRAFT + 2)), n_threads, depth, rounds=3, reps=5, single_steps=True)["ms"]
    return {rows: t / 1e3 for rows, t in ms.items()}


class _Hindsight(PromptLookup):
    """PromptLookup's n-gram choice with each draft cut to its accepted guesses."""
    answer: list[int] = []
    prompt_len = 0

    def upcoming(self, limit: int) -> list[int]:
        done = len(self._tokens) - self.prompt_len
        return self.answer[done:done + min(limit, self.max_draft)]

    def draft(self, limit: int) -> Draft:
        end, future = len(self._tokens), self.upcoming(limit)
        for n in NGRAM_SIZES:
            at = self._index[n].get(tuple(self._tokens[end - n:end])) if end >= n else None
            if at is not None:
                guess = self._tokens[at:at + len(future)]
                return Draft(future[:_agree(guess, future)])
        return NO_DRAFT


class _AnyMatch(_Hindsight):
    """The longest right continuation of any earlier occurrence of the last 1-4 tokens."""

    def draft(self, limit: int) -> Draft:
        toks, end, future = self._tokens, len(self._tokens), self.upcoming(limit)
        best = 0
        for n in range(1, 5):
            tail = toks[end - n:end]
            for j in range(n, end):
                if toks[j - n:j] == tail:
                    best = max(best, _agree(toks[j:j + len(future)], future))
        return Draft(future[:best])


def _agree(guess: list[int], future: list[int]) -> int:
    k = 0
    while k < min(len(guess), len(future)) and guess[k] == future[k]:
        k += 1
    return k


def replay(drafter: PromptLookup, prompt: list[int], answer: list[int], costs: dict[int, float]) -> float:
    """Plain decoding's decode-call time over the drafter's, generating `answer` after `prompt`."""
    drafter.costs = dict(costs)
    if isinstance(drafter, _Hindsight):
        drafter.answer, drafter.prompt_len = answer, len(prompt)
    drafter.extend(prompt)
    drafter.extend(answer[:1])   # the first token comes from the prompt's logits
    i, spent = 1, 0.0
    while i < len(answer):
        guess = drafter.draft(len(answer) - i).tokens
        kept = _agree(guess, answer[i:])
        spent += costs[1 + len(guess)]
        if guess:
            drafter.verified(len(guess), kept)
        drafter.extend(answer[i:i + kept + 1])
        i += kept + 1
    return (len(answer) - 1) * costs[1] / spent if spent else 1.0


def main() -> int:
    import json
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=["smollm2-135m-instruct", "gemma3-270m"])
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--categories", help="only these categories (comma-separated; default: all)")
    args = ap.parse_args()
    prompts = {k: v for k, v in json.loads(PROMPTS.read_text()).items() if isinstance(v, list)}
    if args.categories:
        unknown = set(args.categories.split(",")) - prompts.keys()
        if unknown:
            ap.error(f"no such categories: {', '.join(sorted(unknown))} (there are {', '.join(prompts)})")
        prompts = {k: prompts[k] for k in args.categories.split(",")}
    print(f"CPU: {cpu_name()}, {args.threads} threads, greedy, up to {args.max_tokens} tokens")
    for name in args.models:
        path = str(resolve_model(name))
        model = Model.load(path, n_ctx=2048, n_threads=args.threads)
        print(f"{Path(model.path).name}: speed-up over plain decoding (median; decode calls only)")
        costs_at: dict[int, dict[int, float]] = {}
        for category, texts in prompts.items():
            found = {"lookup": [], "oracle": [], "any match": []}
            for text in texts:
                messages = [{"role": "user", "content": text}]
                prompt = model.chat_prompt(messages).ids
                model.prompt_cache.reset()
                answer = model.chat_complete(messages, max_tokens=args.max_tokens, temperature=0,
                                             speculative=False).tokens
                if len(answer) < 2:
                    continue
                depth = 64 * (len(prompt) // 64 + 1)   # costs change slowly with depth: one table a 64
                if depth not in costs_at:
                    costs_at[depth] = call_costs(path, args.threads, depth)
                costs = costs_at[depth]
                found["lookup"].append(replay(PromptLookup(), prompt, answer, costs))
                found["oracle"].append(replay(_Hindsight(), prompt, answer, costs))
                found["any match"].append(replay(_AnyMatch(), prompt, answer, costs))
            cells = "  ".join(f"{k} {statistics.median(v):.2f}x" for k, v in found.items() if v)
            print(f"  {category:10s} {len(found['lookup'])} prompts  {cells}")
        ratios = next(iter(costs_at.values()))
        print("  decode call / one row: " + " ".join(f"{r}:{c / ratios[1]:.2f}" for r, c in ratios.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
