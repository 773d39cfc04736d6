"""A decode call of a few new tokens with as_single_steps (the batch parallel requests and
speculative verification are made of) gives each token exactly the logits (and cached K/V rows) it
gets decoded alone,
on every ISA and in both float orders, with an F16 or a quantized KV cache: each matmul computes every row in its one-row
order (vec_dot's, through the small-batch GEMMs where the table has them; the GEMV order of the
types llama.cpp repacks), and attention runs row by row as a single step does."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.cli import child_env
from support.isas import isas_under_test

from edgeinfer import _core

# Run in a child so that EDGEINFER_ISA picks the kernel set (it is read once per process).
CHILD = r"""
import json, sys
import numpy as np
from edgeinfer import _core
model = _core.Model(sys.argv[1], exact=sys.argv[3] == "llama.cpp")
ctx = _core.Context(model, n_ctx=128, n_threads=2, type_k=sys.argv[2], type_v=sys.argv[2])
rng = np.random.default_rng(7)
prompt = rng.integers(100, 20000, 40).astype(np.int32)
new = rng.integers(100, 20000, 9).astype(np.int32)
ctx.decode(prompt)
alone = []
for t in new:
    ctx.decode(np.array([t], np.int32))
    alone.append(np.array(ctx.logits[-1]))
alone = np.stack(alone)
kv_alone = ctx.kv_snapshot(len(prompt) + len(new))   # every cached row, the batch's included
differ = {}
for n in (2, 3, 4, 5, 8, 9):
    ctx.truncate(len(prompt))
    ctx.decode(new[:n], all_logits=True, as_single_steps=True)
    batch = np.array(ctx.logits)
    if not np.array_equal(batch.view(np.uint32), alone[:n].view(np.uint32)):
        differ[n] = float(np.abs(batch - alone[:n]).max())
if not np.array_equal(ctx.kv_snapshot(len(prompt) + len(new)), kv_alone):
    differ["kv"] = "the cached K/V rows differ"
print(json.dumps({"isa": _core.isa(), "differ": differ}))
"""


def check_batch_against_single_steps(path, isa: str, kv_type: str, order: str = "llama.cpp") -> None:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), kv_type, order], env=child_env(EDGEINFER_ISA=isa),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"isa": isa, "differ": {}}


@pytest.mark.realmodel
@pytest.mark.parametrize("order", ["llama.cpp", "fast"])
@pytest.mark.parametrize("isa", isas_under_test())
@pytest.mark.parametrize("which", ["smollm2_path", "gemma3_path"])
def test_a_batch_of_new_tokens_gets_the_logits_each_gets_alone(which, isa, order, request):
    """In either float order (cpu/kernels.h FloatOrder)."""
    check_batch_against_single_steps(request.getfixturevalue(which), isa, "f16", order)


@pytest.mark.realmodel
@pytest.mark.parametrize("which", ["smollm2_path", "gemma3_path"])
def test_so_it_does_with_a_quantized_cache(which, request):
    """A q4_0 cache: rotated and centered K, attention split into spans by the batch's shape."""
    check_batch_against_single_steps(request.getfixturevalue(which), _core.isa(), "q4_0")
