"""Which ISAs' kernel tables have an entry, found by calling it: a table without one refuses."""
from __future__ import annotations

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T

from edgeinfer import _core
from edgeinfer import _testing


def isas_with_gemm(qtype: T, order: str | None = None) -> list[str]:
    """The ISAs with a `qtype` gemm in that order (None: the table's plain gemm)."""
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    rows = 16 if order == "packed" else 1   # the packed order takes whole groups of 16 rows
    options = {} if order is None else {"order": order}
    out = []
    for isa in _core.available_isas():
        try:
            _testing.gemm(int(qtype), np.zeros(rows * type_size, np.uint8), rows, np.zeros((1, block_size), np.float32),
                       isa, **options)
        except Exception:
            continue
        out.append(isa)
    return out
