"""Our last-position logits against llama.cpp built for *this* machine, on the fixture prompts.

The fixtures in ../shared/fixtures come from an AVX-512 build of llama.cpp, which our AVX-512
kernels reproduce bit for bit. On a machine without AVX-512, llama.cpp runs its AVX2 code, and so
do we; this script checks those against each other: it runs llama-cpp-python from the bench venv
(scripts/bench_compare.py builds it with -DGGML_NATIVE=ON on first use) and edgeinfer on the same
GGUF file and prompt ids, and prints the largest top-20 logit difference per prompt.

    python scripts/compare_logits_llamacpp.py MODEL.gguf greedy_llamacpp_smollm2 [-t 1]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

from bench_compare import LLAMA_CPP_PACKAGE, default_venv, ensure_llamacpp  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="GGUF file")
    ap.add_argument("fixture", help="a greedy_llamacpp_*.json fixture name (its prompt ids are used)")
    ap.add_argument("-t", "--threads", type=int, default=1)
    args = ap.parse_args()

    from edgeinfer import _core
    from edgeinfer.model import Model

    fixtures = Path(os.environ.get("EDGEINFER_FIXTURES", REPO.parent / "shared" / "fixtures"))
    cases = json.loads((fixtures / f"{args.fixture.removesuffix('.json')}.json").read_text())["results"]
    prompts = [c["prompt_ids"] for c in cases]

    py = ensure_llamacpp(default_venv(), LLAMA_CPP_PACKAGE)
    request = json.dumps({"model": str(Path(args.model).resolve()), "n_threads": args.threads,
                          "prompts": prompts, "top_k": 20})
    proc = subprocess.run([str(py), str(REPO / "scripts" / "llamacpp_logits_worker.py")], input=request,
                          capture_output=True, text=True, check=True)
    theirs = json.loads(proc.stdout)

    model = Model.load(args.model, n_ctx=512, n_threads=args.threads)
    print(f"edgeinfer isa={_core.isa()}; llama.cpp: {theirs['system_info'].strip()}")
    worst = 0.0
    for case, ref in zip(cases, theirs["results"]):
        logits = model.eval_logits(case["prompt_ids"])[-1]
        diff = float(np.abs(logits[ref["ids"]] - np.asarray(ref["logits"], dtype=np.float32)).max())
        worst = max(worst, diff)
        print(f"{case['name']:<16} {len(case['prompt_ids']):>4} ids  top-20 max |diff| {diff:.6f}  "
              f"same argmax: {int(logits.argmax()) == ref['ids'][0]}")
    print(f"worst: {worst:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
