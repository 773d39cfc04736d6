#!/usr/bin/env python3
"""Peak memory (RSS) while generating: edgeinfer vs llama.cpp on the same GGUF.

    python scripts/rss_compare.py -m MODEL.gguf [-m ...] [-t 2] [-c 2048] [-p 512] [-n 128]

Each engine runs alone in a fresh process (llama.cpp in the venv scripts/bench_compare.py
builds): load the model (both mmap it), make a context of -c positions with F16 K/V, decode -p
fixed prompt ids, then -n single-token steps. The process reports its peak RSS (ru_maxrss) and
its RSS before the model was loaded (the interpreter and the engine's libraries), so the table
shows both the whole process and what loading and generating added.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from bench_compare import LLAMA_CPP_PACKAGE, default_venv, ensure_llamacpp

REPO = Path(__file__).resolve().parent.parent

# Both children print one JSON line: {"base_kib": ..., "peak_kib": ...}. ids are fixed and
# within every vocabulary (the same ones bench_compare uses: 1000 + i).
EDGEINFER_CHILD = r"""
import json, resource, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from edgeinfer import _core
path, n_threads, n_ctx, n_prompt, n_gen = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
model = _core.Model(path)
ctx = _core.Context(model, n_ctx=n_ctx, n_threads=n_threads, n_batch=512)
ctx.decode(np.arange(1000, 1000 + n_prompt, dtype=np.int32))
for i in range(n_gen):
    ctx.decode(np.array([2000 + i], dtype=np.int32))
print(json.dumps({"base_kib": base, "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""

LLAMACPP_CHILD = r"""
import ctypes, json, resource, sys
import llama_cpp as L
path, n_threads, n_ctx, n_prompt, n_gen = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
L.llama_backend_init()
model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
cp = L.llama_context_default_params()
cp.n_ctx = n_ctx; cp.n_batch = 512; cp.n_ubatch = 512; cp.n_threads = n_threads; cp.n_threads_batch = n_threads
ctx = L.llama_init_from_model(model, cp)
ids = (L.llama_token * n_prompt)(*range(1000, 1000 + n_prompt))
assert L.llama_decode(ctx, L.llama_batch_get_one(ids, n_prompt)) == 0
for i in range(n_gen):
    one = (L.llama_token * 1)(2000 + i)
    assert L.llama_decode(ctx, L.llama_batch_get_one(one, 1)) == 0
print(json.dumps({"base_kib": base, "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def run_child(cmd: list[str]) -> dict:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"[rss_compare] {' '.join(cmd[:3])} ... failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", action="append", required=True, help="GGUF file (repeatable)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-c", "--ctx-size", type=int, default=2048)
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("--venv", type=Path, default=None, help="where the llama.cpp venv lives")
    args = ap.parse_args()

    llama_py = ensure_llamacpp(args.venv or default_venv(), LLAMA_CPP_PACKAGE)
    common = [str(args.threads), str(args.ctx_size), str(args.n_prompt), str(args.n_gen)]
    print(f"peak RSS, {args.threads} threads, n_ctx {args.ctx_size}, pp {args.n_prompt} + tg {args.n_gen} "
          "(MiB; 'added' = peak minus the process before loading)")
    print("| model | edgeinfer peak | llama.cpp peak | ratio | edgeinfer added | llama.cpp added | ratio |")
    print("|---|---|---|---|---|---|---|")
    for path in args.model:
        e = run_child([sys.executable, "-c", EDGEINFER_CHILD, str(REPO), path, *common])
        ll = run_child([str(llama_py), "-c", LLAMACPP_CHILD, path, *common])
        mib = lambda kib: kib / 1024  # noqa: E731
        e_add, l_add = e["peak_kib"] - e["base_kib"], ll["peak_kib"] - ll["base_kib"]
        print(f"| {Path(path).name} | {mib(e['peak_kib']):.0f} | {mib(ll['peak_kib']):.0f} | "
              f"{e['peak_kib'] / ll['peak_kib']:.2f} | {mib(e_add):.0f} | {mib(l_add):.0f} | {e_add / l_add:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
