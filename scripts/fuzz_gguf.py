#!/usr/bin/env python3
"""Long fuzz run of the whole load path: N mutated GGUF files through Model.load and tokenize.

    python3 scripts/fuzz_gguf.py                      # 10,000 variants, seed 1
    python3 scripts/fuzz_gguf.py -n 500 --seed 7 --jobs 2
    python3 scripts/fuzz_gguf.py --seed 1 --only 4711 # re-make and re-run one variant
    python3 scripts/fuzz_gguf.py --replay fuzz-gguf-failures/*.gguf

Each variant is one mutation (tests/support/gguf_mutate.py: header, keys and values, arrays of the
vocabulary, the tensor table, truncation, bit flips, weights) of a complete model
(tests/support/model_fuzz.py: tiny llama with a BPE vocabulary, tiny gemma3 with an SPM one, each F32 and
quantized, and SmolLM2's real header over zeroed weights). A child process (tests/support/fuzz_runner.py,
tests/support/gguf_fuzz_child.py; address-space limit, timeout) loads it with
Model.load(path, n_ctx=64, n_threads=1), tokenizes three texts (ASCII, multi-byte UTF-8,
special-token text parsed), detokenizes them, decodes two tokens and renders the chat prompt.

Acceptable: success, a ModelFormatError or another EdgeInferError, a plain ValueError. Failures: a
crash (a signal, or an AddressSanitizer report in a sanitizer build), a hang, any other exception
(MemoryError, UnicodeDecodeError, TypeError, ...). Failing
variants are written to --out with a JSON note each; the exit status is 1 if there was any.

The shared code lives in tests/support/ because the tiny models the variants start from are the tests'
own builders; this script puts tests/ on sys.path and imports it as the `support` package.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from support.fuzz_runner import MEMORY_LIMIT, is_failure, run_variants  # noqa: E402
from support.model_fuzz import make_model_bases, variant  # noqa: E402

from edgeinfer import _core  # noqa: E402
from edgeinfer.machine import cpu_name  # noqa: E402

OUTCOMES = ["ok", "format_error", "error", "other", "crash", "hang", "batch_death"]


def default_smollm2() -> Path | None:
    from edgeinfer.catalog import get_entry

    entry = get_entry("smollm2-135m-instruct")
    return entry.path if entry.is_present() else None


def run_batch(bases, seed: int, indices: list[int], folder: Path, timeout: float,
              memory_limit: int) -> tuple[list[tuple], list[str]]:
    """Makes, writes and runs the variants `indices`; returns (index, base, variant, result, path)
    for each, and notes on child deaths no variant can be blamed for."""
    made = []
    for i in indices:
        base, v = variant(bases, seed, i)
        made.append((i, base, v, v.write(folder / f"v{i:06d}.gguf")))
    results, notes = run_variants([(i, str(path)) for i, _, _, path in made], "model", timeout, memory_limit)
    out = [(i, base, v, results[i], path) for i, base, v, path in made]
    for *_, r, path in out:
        if not is_failure("model", r):
            path.unlink()
    return out, notes


def print_table(title: str, rows: dict[str, collections.Counter]) -> None:
    cols = [o for o in OUTCOMES if any(c[o] for c in rows.values())]
    print(f"\n| {title} | " + " | ".join(cols) + " | total |")
    print("|---" * (len(cols) + 2) + "|")
    for name in sorted(rows):
        c = rows[name]
        print(f"| {name} | " + " | ".join(str(c[o]) for o in cols) + f" | {sum(c.values())} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=10_000, help="number of variants (default 10000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batch", type=int, default=100, help="variants per child process")
    ap.add_argument("--jobs", type=int, default=1, help="child processes at a time")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds one variant may take")
    ap.add_argument("--memory-limit", type=int, default=MEMORY_LIMIT >> 20,
                    help="MiB of address space per child (0: none, for an AddressSanitizer build)")
    ap.add_argument("--out", type=Path, default=Path("fuzz-gguf-failures"), help="where failing variants go")
    ap.add_argument("--smollm2", type=Path, default=None, help="SmolLM2 GGUF (default: the models folder's)")
    ap.add_argument("--no-smollm2", action="store_true", help="tiny models only")
    ap.add_argument("--only", type=int, nargs="+", help="run only these variant indices")
    ap.add_argument("--replay", type=Path, nargs="+", help="run these files instead of making variants")
    args = ap.parse_args()
    memory_limit = args.memory_limit << 20

    if args.replay:
        results, notes = run_variants([(i, str(p)) for i, p in enumerate(args.replay)], "model", args.timeout,
                                      memory_limit)
        for i, p in enumerate(args.replay):
            print(f"{p}: {results[i]}")
        return int(bool(notes) or any(is_failure("model", r) for r in results.values()))

    smollm2 = None if args.no_smollm2 else args.smollm2 or default_smollm2()
    if smollm2 is None and not args.no_smollm2:
        print("SmolLM2 not found in the models folder: tiny models only", file=sys.stderr)
    indices = args.only or list(range(args.n))
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fuzz_gguf_") as tmp:
        folder = Path(tmp)
        bases = make_model_bases(folder, smollm2)
        batches = [indices[k:k + args.batch] for k in range(0, len(indices), args.batch)]
        done: list[tuple] = []
        notes: list[str] = []
        with ThreadPoolExecutor(args.jobs) as pool:
            for out, batch_notes in pool.map(
                    lambda b: run_batch(bases, args.seed, b, folder, args.timeout, memory_limit), batches):
                done += out
                notes += batch_notes
                print(f"\r{len(done)}/{len(indices)} variants, {time.perf_counter() - start:.0f} s",
                      end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        failures = [(i, base, v, r, path) for i, base, v, r, path in done if is_failure("model", r)]
        if failures:
            args.out.mkdir(parents=True, exist_ok=True)
            for i, base, v, r, path in failures:
                name = f"seed{args.seed}-{i:06d}-{v.kind}"
                (args.out / f"{name}.gguf").write_bytes(path.read_bytes())
                note = dict(seed=args.seed, index=i, base=base.name, kind=v.kind, label=v.label, **vars(r),
                            reproduce=f"python3 scripts/fuzz_gguf.py --seed {args.seed} --only {i}")
                (args.out / f"{name}.json").write_text(json.dumps(note, indent=1) + "\n")
    seconds = time.perf_counter() - start

    total = collections.Counter(r.outcome for *_, r, _ in done)
    by_kind: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    by_base: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    by_stage: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for _, base, v, r, _ in done:
        by_kind[v.kind][r.outcome] += 1
        by_base[base.name][r.outcome] += 1
        by_stage[r.stage or ("(all passed)" if r.outcome == "ok" else "(none reported)")][r.outcome] += 1

    print(f"fuzz_gguf: {len(done)} variants, seed {args.seed}, {seconds:.0f} s "
          f"({len(done) / seconds:.1f} variants/s, {args.jobs} job(s)), CPU: {cpu_name()}, ISA: {_core.isa()}")
    print("bases: " + ", ".join(base.name for base in bases))
    print("outcomes: " + ", ".join(f"{o} {total[o]}" for o in OUTCOMES if total[o]))
    print_table("mutation kind", by_kind)
    print_table("base model", by_base)
    print_table("stage that raised", by_stage)
    for note in notes:
        print(f"\nFAILURE: {note}")
    if failures:
        print(f"\n{len(failures)} FAILURES (written to {args.out}/):")
        for i, base, v, r, _ in failures[:50]:
            print(f"  #{i} {base.name} {v.kind}: {v.label}\n      -> {r.outcome} {r.stage} {r.type}: {r.message[:300]}")
    if failures or notes:
        return 1
    print("\n0 failures: no crash, no hang, no exception outside EdgeInferError / ValueError")
    return 0


if __name__ == "__main__":
    sys.exit(main())
