"""What Python reads of a model file without loading it (edgeinfer.hparams) and the KV row sizes
it derives from the core's type table (edgeinfer.gpu.model_plan) agree with the core's own
reading of a loaded model: the plan and `edgeinfer info` cannot size a cache the core would not
allocate."""
from __future__ import annotations

import pytest

from edgeinfer import _core
from edgeinfer.gpu.model_plan import kv_row_bytes
from edgeinfer.hparams import read_hparams
from edgeinfer.model import KV_CACHE_TYPES
from edgeinfer.quantize.plan import ModelShape


class Metadata(dict):
    """A stand-in for a _core.GgufFile's metadata."""

    def get(self, key, default=None):
        return super().get(key, default)


def test_per_layer_head_counts_and_missing_sizes():
    h = read_hparams(Metadata({"general.architecture": "x", "x.block_count": 3, "x.embedding_length": 64,
                               "x.attention.head_count": 4, "x.attention.head_count_kv": [2, 0, 1]}))
    assert h.n_head == (4, 4, 4) and h.n_head_kv == (2, 0, 1)
    assert h.kv_dims() == (3, 32, 32)   # the widest layer: 2 KV heads of 64 / 4 = 16 values
    assert ModelShape.from_hparams(h) == ModelShape("x", n_layer=3, n_head=4, n_head_kv=2)
    assert read_hparams(Metadata({"general.architecture": "x", "x.block_count": 3})).kv_dims() is None
    assert read_hparams(Metadata()).kv_dims() is None


def test_kv_rows_that_do_not_fill_their_blocks_have_no_size():
    assert kv_row_bytes("f16", 100) == 200
    assert kv_row_bytes("q8_0", 64) == 2 * 34 and kv_row_bytes("q4_0", 64) == 2 * 18
    assert kv_row_bytes("q8_0", 100) is None


@pytest.mark.realmodel
@pytest.mark.parametrize("which", ["smollm2_path", "gemma3_path"])
def test_the_file_reading_agrees_with_the_loaded_model(which, request):
    model = _core.Model(str(request.getfixturevalue(which)))
    n_layer, k_dim, v_dim = read_hparams(model.gguf).kv_dims()
    assert n_layer == model.n_layer and k_dim == v_dim == model.n_head_kv * model.head_dim
    for kv_type in KV_CACHE_TYPES:
        ctx = _core.Context(model, n_ctx=16, type_k=kv_type, type_v=kv_type, rotate_k=False, center_k=False)
        assert n_layer * (kv_row_bytes(kv_type, k_dim) + kv_row_bytes(kv_type, v_dim)) == ctx.kv_bytes_per_token
