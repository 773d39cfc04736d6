"""The CPU path's logits that the OpenCL offload must reproduce, computed with the x86 AVX2
kernels: the device mirrors those (gpu/kernels/vec_dot.cl, attention.cl), so on a machine whose
best ISA is another one (AVX-512) the reference is computed in a child process with
EDGEINFER_ISA=avx2 (the ISA is chosen once per process).

For each prompt: `greedy` decodes it as one batch and then 32 greedy tokens one call each (the
token ids and the logits of each step), `batch` decodes the prompt and then those tokens but the
last as a second batch, keeping the logits from the prompt's last position on (what a
teacher-forced device pass is compared with).

`under_avx2` also runs a partly offloaded model there: its CPU layers must use the kernels the
device mirrors for the logits to be the reference's bits.

Run as a script: opencl_cpu_reference.py MODEL SPEC.json OUT.npz (SPEC: {"prompts": ..., and
compute()'s keyword arguments}).
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

N_TOKENS = 32


def greedy(ctx, prompt: list[int], n: int = N_TOKENS) -> tuple[list[int], np.ndarray]:
    """n greedy tokens after `prompt` (one decode call per token) and the logits they came from."""
    ctx.truncate(0)
    ctx.decode(np.array(prompt, np.int32))
    ids, logits = [], []
    for _ in range(n):
        logits.append(np.array(ctx.logits[0]))
        ids.append(int(np.argmax(logits[-1])))
        ctx.decode(np.array(ids[-1:], np.int32))
    return ids, np.array(logits)


def teacher_forced(ctx, prompt: list[int], ids: list[int]) -> np.ndarray:
    """[len(ids), n_vocab]: the logits after prompt and after each of ids[:-1]: the prompt as one
    batch, then ids[:-1] as another (each under 64 rows, where the CPU's F16 attention would
    switch to its tiled kernel, which the device does not mirror)."""
    ctx.truncate(0)
    ctx.decode(np.array(prompt, np.int32))
    first = np.array(ctx.logits[0])
    ctx.decode(np.array(ids[:-1], np.int32), all_logits=True)
    return np.vstack([first[None], np.array(ctx.logits)])


def compute(model_path: str, prompts: list[list[int]], gpu_layers: str | None = None, device: int = 0,
            forced: list[list[int]] | None = None) -> dict[str, np.ndarray]:
    """The reference for `prompts` (greedy and batch), or, given `forced` (each prompt's greedy
    ids), only the teacher-forced batches of a model with `gpu_layers` on OpenCL device `device`."""
    from edgeinfer.model import Model

    ctx = Model.load(model_path, n_ctx=512, gpu_layers=gpu_layers, device=device)._ctx
    if forced is not None:
        return {f"batch{i}": teacher_forced(ctx, prompt, ids) for i, (prompt, ids) in enumerate(zip(prompts, forced))}
    out = {}
    for i, prompt in enumerate(prompts):
        ids, logits = greedy(ctx, prompt)
        out[f"ids{i}"], out[f"greedy{i}"] = np.array(ids), logits
        out[f"batch{i}"] = teacher_forced(ctx, prompt, ids)
    return out


def under_avx2(model_path: str | Path, prompts: list[list[int]], **options) -> dict[str, np.ndarray] | None:
    """compute() under the AVX2 kernels (in a child process unless they are this process's
    choice already), or None where this CPU has none (not x86)."""
    from edgeinfer import _core

    if _core.isa() == "avx2":
        return compute(str(model_path), prompts, **options)
    if "avx2" not in _core.available_isas():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        spec, out = Path(tmp) / "spec.json", Path(tmp) / "ref.npz"
        spec.write_text(json.dumps({"prompts": prompts, **options}))
        # Not imported at the top: the child runs this file as a script, outside the package.
        from support.cli import child_env
        from support.paths import REPO_ROOT

        subprocess.run([sys.executable, __file__, str(model_path), str(spec), str(out)],
                       env=child_env(EDGEINFER_ISA="avx2"), check=True, cwd=REPO_ROOT)
        with np.load(out) as f:
            return dict(f)


def reference(model_path: str | Path, prompts: list[list[int]]) -> dict[str, np.ndarray] | None:
    """The CPU path's logits for `prompts` under the AVX2 kernels (None: no AVX2 here)."""
    return under_avx2(model_path, prompts)


if __name__ == "__main__":
    spec = json.loads(Path(sys.argv[2]).read_text())
    result = compute(sys.argv[1], spec.pop("prompts"), **spec)
    np.savez(sys.argv[3], **result)
