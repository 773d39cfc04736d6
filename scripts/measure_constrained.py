#!/usr/bin/env python3
"""Constrained decoding on real models: how often realistic schemas finish, and what a mask costs.

    python scripts/measure_constrained.py MODEL.gguf [MODEL.gguf ...] [-n 256] [-T 0.7] [--seeds 1]

For each model and each schema below (strings left unbounded, as users write them), one chat
answer at temperature T: does the grammar close within N tokens ("stop"), and does the text
validate (jsonschema)? Then the mask cost, two ways:
  * full mask: the answer's tokens replayed through a fresh matcher, the whole-vocabulary mask
    computed before each one (the cost if every step were masked), mean and p99;
  * as run: the decoding loop masks only when the sampler's draw is rejected; the share of steps
    that needed it and the single-token check's cost.
Decode speed with and without a schema is the generation's own tok/s (same prompt, same seed).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

import jsonschema

from edgeinfer.constrain import GrammarMatcher, make_grammar
from edgeinfer.generate import make_token_picker, stream_generate
from edgeinfer.model import Model
from edgeinfer.sampling import DEFAULTS

STR = {"type": "string"}
SCHEMAS = {
    "person": ({"type": "object", "required": ["name", "age", "email"], "properties": {
        "name": STR, "age": {"type": "integer"}, "email": {"type": "string", "format": "email"}}},
        "Make up a person with a name, an age and an email address."),
    "sentiment": ({"type": "object", "required": ["label", "score"], "properties": {
        "label": {"enum": ["positive", "negative", "neutral"]}, "score": {"type": "number"}}},
        "What is the sentiment of: 'The battery died after an hour.'?"),
    "recipe": ({"type": "object", "required": ["title", "ingredients", "minutes"], "properties": {
        "title": STR, "ingredients": {"type": "array", "items": STR, "minItems": 2, "maxItems": 6},
        "minutes": {"type": "integer", "minimum": 1}}}, "Give a quick pancake recipe."),
    "weather_call": ({"type": "object", "required": ["city", "unit"], "properties": {
        "city": STR, "unit": {"enum": ["celsius", "fahrenheit"]}}},
        "Arguments for get_weather: what is the weather in Lisbon?"),
    "product": ({"type": "object", "required": ["name", "price", "in_stock", "tags"], "properties": {
        "name": STR, "price": {"type": "number", "minimum": 0}, "in_stock": {"type": "boolean"},
        "tags": {"type": "array", "items": STR, "maxItems": 5}}},
        "Describe a product for an online shop."),
    "event": ({"type": "object", "required": ["title", "date", "attendees"], "properties": {
        "title": STR, "date": {"type": "string", "format": "date"},
        "attendees": {"type": "array", "items": STR}}}, "Make up a team meeting."),
    "address": ({"type": "object", "required": ["street", "city", "zip", "country"], "properties": {
        "street": STR, "city": STR, "zip": STR, "country": STR}}, "Give the address of a museum."),
    "classification": ({"type": "object", "required": ["category", "confidence", "reason"], "properties": {
        "category": {"enum": ["bug", "feature", "question"]},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1}, "reason": STR}},
        "Classify: 'The app crashes when I press save.'"),
    "nested_order": ({"type": "object", "required": ["customer", "items"], "properties": {
        "customer": {"type": "object", "required": ["name", "id"], "properties": {
            "name": STR, "id": {"type": "integer"}}},
        "items": {"type": "array", "minItems": 1, "items": {"type": "object", "required": ["sku", "qty"],
                  "properties": {"sku": STR, "qty": {"type": "integer", "minimum": 1}}}}}},
        "Make up an order of two items."),
    "answer_or_null": ({"type": "object", "required": ["answer"], "properties": {
        "answer": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}, "How many legs does a spider have?"),
}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(model: Model, name: str, schema: dict | None, question: str, n: int, temperature: float, seed: int):
    params = dataclasses.replace(DEFAULTS, temperature=temperature, seed=seed)
    matcher = model.compile_constraint(json_schema=schema) if schema else None
    gen = stream_generate(model._core, model.prompt_cache, model.chat_prompt(f"Answer in JSON. {question}").ids,
                          make_token_picker(params), n, matcher=matcher)
    while True:
        try:
            next(gen)
        except StopIteration as done:
            return done.value, matcher


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("-n", type=int, default=256, help="max tokens per answer (default: %(default)s)")
    ap.add_argument("-T", "--temperature", type=float, default=0.7)
    ap.add_argument("--seeds", type=int, default=1, help="answers per schema (seeds 1..N)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    args = ap.parse_args()
    for path in args.models:
        model = Model.load(path, n_ctx=2048, n_threads=args.threads)
        t0 = time.perf_counter()
        tokenizer = model.constraint_tokenizer
        print(f"{path.name}: llguidance tokenizer built in {(time.perf_counter() - t0) * 1e3:.0f} ms "
              f"({tokenizer.vocab_size} tokens)")
        finished = valid = total = masked_steps = steps = 0
        full_mask, checks, speed_ratio = [], [], []
        for name, (schema, question) in SCHEMAS.items():
            for seed in range(1, args.seeds + 1):
                result, matcher = run(model, name, schema, question, args.n, args.temperature, seed)
                total += 1
                ok = False
                if result.finish_reason == "stop":
                    finished += 1
                    try:
                        jsonschema.validate(json.loads(result.text), schema, format_checker=jsonschema.FormatChecker())
                        ok = True
                        valid += 1
                    except (json.JSONDecodeError, jsonschema.ValidationError):
                        pass
                steps += len(result.tokens)
                masked_steps += len(matcher.mask_times)
                checks += matcher.check_times
                replay = GrammarMatcher(tokenizer, make_grammar(schema).text)
                for token in result.tokens:
                    replay.allowed()
                    replay.try_consume(token)
                full_mask += replay.mask_times
                free, _ = run(model, name, None, question, len(result.tokens) or 1, args.temperature, seed)
                if free.timings.gen_tok_s and result.timings.gen_tok_s:
                    speed_ratio.append(result.timings.gen_tok_s / free.timings.gen_tok_s)
                print(f"  {name:15s} seed {seed}: {result.finish_reason:6s} {len(result.tokens):3d} tokens "
                      f"{'valid' if ok else 'INVALID' if result.finish_reason == 'stop' else '-'}  "
                      f"{result.text[:90]!r}")
        us = [t * 1e6 for t in full_mask]
        print(f"  finished within {args.n} tokens: {finished}/{total}, valid: {valid}/{total}")
        print(f"  full mask per token: mean {statistics.mean(us):.0f} us, p99 {percentile(us, 0.99):.0f} us "
              f"over {len(us)} tokens")
        check_us = [t * 1e6 for t in checks]
        print(f"  as run: masked {masked_steps}/{steps} steps ({100 * masked_steps / max(steps, 1):.0f}%), "
              f"single-token check mean {statistics.mean(check_us):.0f} us, p99 {percentile(check_us, 0.99):.0f} us")
        if speed_ratio:
            print(f"  decode speed with a schema / without: {statistics.mean(speed_ratio):.3f} (mean of {len(speed_ratio)})")


if __name__ == "__main__":
    main()
