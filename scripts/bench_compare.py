#!/usr/bin/env python3
"""edgeinfer vs llama.cpp on the same GGUF, same threads, same token ids, side by side.

    python scripts/bench_compare.py -m MODEL.gguf [-m ...] -t 1,2 -p 512 -n 128 -r 5 [--json]

On first use this creates a virtual environment (platformdirs' user cache dir,
``edgeinfer/bench-venv``; ``--venv`` to put it elsewhere) and installs llama.cpp's Python binding
there, built from source for this CPU (``CMAKE_ARGS=-DGGML_NATIVE=ON``; a few minutes on two
cores). edgeinfer runs in this process; llama.cpp runs in a worker process of that venv
(scripts/bench_llamacpp_worker.py), driven over a pipe, so neither engine's build leaks into the
other.

Both sides do the same thing, the way llama-bench does: ``pp``: one decode of P fixed token ids
from an empty KV cache; ``tg``: N single-token decodes from an empty cache. Only the native decode
calls are timed: no tokenizer, no sampler, logits of the last row only. Repetitions alternate
between the engines (e, l, e, l, ...) after one warm-up run each, so slow phases of a noisy VM
hit both; the hypervisor steal time of each run is read from /proc/stat and reported.
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
    def __init__(self, python: Path):
        self.proc = subprocess.Popen([str(python), str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)

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

    def close(self) -> None:
        try:
            self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        self.proc.wait(timeout=60)


# -- edgeinfer ---------------------------------------------------------------------------------

class EdgeInferEngine:
    def __init__(self, path: str, n_threads: int, n_ctx: int, n_batch: int):
        from edgeinfer import _core
        self.model = _core.Model(path)
        self.ctx = _core.Context(self.model, n_ctx=n_ctx, n_threads=n_threads, n_batch=n_batch)

    def run(self, kind: str, ids) -> int:
        from edgeinfer.bench import time_generation, time_prompt
        return time_prompt(self.ctx, ids) if kind == "pp" else time_generation(self.ctx, ids)


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
    model: str
    test: str
    n_threads: int
    edgeinfer_ns: list[int] = field(default_factory=list)
    llamacpp_ns: list[int] = field(default_factory=list)
    steal_pct: list[float] = field(default_factory=list)

    @property
    def n_tokens(self) -> int:
        return int(self.test[2:])

    def ts(self, samples: list[int]) -> list[float]:
        return [self.n_tokens * 1e9 / ns for ns in samples]

    def summary(self) -> dict:
        e, l = self.ts(self.edgeinfer_ns), self.ts(self.llamacpp_ns)
        sd = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0  # noqa: E731
        return dict(model=self.model, test=self.test, n_threads=self.n_threads,
                    edgeinfer_ts=e, llamacpp_ts=l,
                    edgeinfer_mean=statistics.fmean(e), edgeinfer_sd=sd(e), edgeinfer_median=statistics.median(e),
                    llamacpp_mean=statistics.fmean(l), llamacpp_sd=sd(l), llamacpp_median=statistics.median(l),
                    ratio_median=statistics.median(e) / statistics.median(l),
                    ratio_mean=statistics.fmean(e) / statistics.fmean(l),
                    # Each round's two runs are seconds apart, so a slow phase of a noisy host
                    # hits both: the median of the per-round ratios cancels it where the ratio of
                    # the medians (of runs from different phases) does not.
                    ratio_paired=statistics.median(a / b for a, b in zip(e, l)),
                    max_steal_pct=max(self.steal_pct, default=0.0))


def timed(fn) -> tuple[int, float]:
    s0, t0 = read_steal()
    ns = fn()
    s1, t1 = read_steal()
    return ns, (100.0 * (s1 - s0) / (t1 - t0) if t1 > t0 else 0.0)


def compare(models, threads, n_prompt, n_gen, reps, n_batch, worker: LlamaCppWorker, log) -> list[Cell]:
    from edgeinfer import _core
    from edgeinfer.bench import make_token_ids
    tests = [("pp", p) for p in n_prompt if p > 0] + [("tg", g) for g in n_gen if g > 0]
    n_ctx = max(n for _, n in tests)
    cells = []
    for path in models:
        n_vocab = _core.Model(str(path)).n_vocab
        ids = make_token_ids(n_ctx, n_vocab)
        for t in threads:
            worker.call(cmd="load", model=str(path), n_threads=t, n_ctx=n_ctx, n_batch=n_batch)
            ei = EdgeInferEngine(str(path), t, n_ctx, n_batch)
            for kind, n in tests:
                cell = Cell(Path(path).name, f"{kind}{n}", t)
                part = ids[:n]
                as_list = [int(i) for i in part]
                run_e = lambda: ei.run(kind, part)  # noqa: E731
                run_l = lambda: worker.call(cmd=kind, ids=as_list)["ns"]  # noqa: E731
                run_e(), run_l()  # warm-up
                for _ in range(reps):
                    for who, fn in (("e", run_e), ("l", run_l)):
                        time.sleep(0.05)  # let the other engine's spinning workers go to sleep
                        ns, steal = timed(fn)
                        (cell.edgeinfer_ns if who == "e" else cell.llamacpp_ns).append(ns)
                        cell.steal_pct.append(steal)
                s = cell.summary()
                log(f"{cell.model} {cell.test} t={t}: edgeinfer {s['edgeinfer_median']:.1f}, "
                    f"llama.cpp {s['llamacpp_median']:.1f} tok/s (x{s['ratio_median']:.2f}, "
                    f"paired x{s['ratio_paired']:.2f})")
                cells.append(cell)
            del ei
    return cells


def markdown(cells: list[Cell]) -> str:
    rows = ["| model | threads | test | edgeinfer tok/s (mean ± sd, median) | llama.cpp tok/s (mean ± sd, median) "
            "| ratio (median) | paired ratio | max steal % |", "|---|---|---|---|---|---|---|---|"]
    for c in cells:
        s = c.summary()
        rows.append(f"| {s['model']} | {s['n_threads']} | {s['test']} | "
                    f"{s['edgeinfer_mean']:.1f} ± {s['edgeinfer_sd']:.1f}, {s['edgeinfer_median']:.1f} | "
                    f"{s['llamacpp_mean']:.1f} ± {s['llamacpp_sd']:.1f}, {s['llamacpp_median']:.1f} | "
                    f"**{s['ratio_median']:.2f}** | {s['ratio_paired']:.2f} | {s['max_steal_pct']:.0f} |")
    return "\n".join(rows)


def int_list(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", action="append", required=True, help="GGUF file (repeatable)")
    ap.add_argument("-t", "--threads", type=int_list, default=[1, 2])
    ap.add_argument("-p", "--n-prompt", type=int_list, default=[512])
    ap.add_argument("-n", "--n-gen", type=int_list, default=[128])
    ap.add_argument("-r", "--repetitions", type=int, default=5)
    ap.add_argument("-b", "--batch-size", type=int, default=512)
    ap.add_argument("--venv", type=Path, default=None, help="where the llama.cpp venv lives")
    ap.add_argument("--package", default=LLAMA_CPP_PACKAGE, help="pip requirement for the binding")
    ap.add_argument("--json", action="store_true", help="print every sample as JSON")
    args = ap.parse_args()

    py = ensure_llamacpp(args.venv or default_venv(), args.package)
    worker = LlamaCppWorker(py)
    try:
        from edgeinfer import _core
        from edgeinfer.machine import machine_summary
        info = worker.call(cmd="load", model=args.model[0], n_threads=1, n_ctx=16, n_batch=16)
        log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
        log(f"[bench_compare] machine: {machine_summary()}")
        log(f"[bench_compare] edgeinfer isa={_core.isa()}; llama-cpp-python {info['version']}: {info['system_info']}")
        cells = compare(args.model, args.threads, args.n_prompt, args.n_gen, args.repetitions, args.batch_size,
                        worker, log)
    finally:
        worker.close()
    if args.json:
        print(json.dumps({"machine": machine_summary(), "edgeinfer_isa": _core.isa(), "llamacpp": info,
                          "cells": [c.summary() for c in cells]}, indent=2))
    else:
        print(markdown(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
