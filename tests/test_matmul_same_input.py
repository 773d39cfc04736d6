"""matmul_same_input (cpu/matmul.h): a layer's Q, K and V (gate and up) through one conversion of
the activations and, where every weight is repacked, one pool job over all their groups. Each
output must be the bits of its own matmul: repacked and mapped weights, mixed types (one
activation type, or two: then each goes on its own), group counts that split unevenly between
tasks, decode steps, batches and prompt-sized chunks, both float orders, every x86 table."""
from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as T  # noqa: E402

from edgeinfer import _testing  # noqa: E402
from support.isas import isas_under_test  # noqa: E402
from support.quant_rows import random_blocks  # noqa: E402

ISAS = isas_under_test(("scalar", "avx2", "avx512"))

# (type, rows) per weight, k: Q/K/V-like shapes (48 + 16 + 16 rows: 3 + 1 + 1 groups), a
# gate/up pair, weights the table does not repack (rows not a multiple of 16, k-quants), a mix of
# activation types (Q4_1's q8_1 beside Q8_0's q8_0).
WEIGHT_SETS = [
    ([(T.Q4_1, 48), (T.Q4_1, 16), (T.Q4_1, 16)], 64),
    ([(T.Q4_0, 32), (T.Q4_0, 32)], 96),
    ([(T.Q8_0, 16), (T.Q5_0, 48), (T.Q8_0, 32)], 64),
    ([(T.Q6_K, 32), (T.Q4_K, 16), (T.Q6_K, 16)], 256),
    ([(T.Q4_1, 40), (T.Q4_1, 24)], 64),
    ([(T.Q4_1, 32), (T.Q8_0, 16)], 64),
    ([(T.IQ4_NL, 32), (T.Q4_0, 16), (T.IQ4_XS, 16)], 256),
]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("weights,k", WEIGHT_SETS, ids=lambda v: "-".join(f"{t.name}x{r}" for t, r in v)
                         if isinstance(v, list) else str(v))
@pytest.mark.parametrize("n", [1, 3, 8, 9, 20])
@pytest.mark.parametrize("fast", [False, True])
def test_each_output_is_its_own_matmuls_bits(isa, weights, k, n, fast):
    rng = np.random.default_rng([len(weights), k, n, int(fast)])
    ws = [(int(t), random_blocks(t, rows * k, rng), rows) for t, rows in weights]
    x = (rng.standard_normal((n, k)) * 3).astype(np.float32)
    for threads in (1, 3):
        for per_row in (False, True):
            alone = _testing.matmul(ws, x, threads, isa, fast, False, per_row)
            joint = _testing.matmul(ws, x, threads, isa, fast, True, per_row)
            for i, (a, b) in enumerate(zip(alone, joint)):
                assert a.shape == (n, ws[i][2])
                assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), (i, threads, per_row)


def test_too_many_weights_are_refused():
    w = (int(T.Q8_0), np.zeros(34 * 2, np.uint8), 1)
    with pytest.raises(Exception, match="weights"):
        _testing.matmul([w] * 5, np.zeros((1, 64), np.float32), 1, None, False, True, False)
