"""Hyper-parameters read from a file without loading it: the core's own reading
(`GgufFile.hparams()`, the one the loader uses) sizes the placement plan and `edgeinfer info`'s KV
estimate with the core's type table, so neither can size a cache the core would not allocate; the
quantizer's presets read the few keys they need from the metadata of a file of any architecture."""
from __future__ import annotations

import gguf
import pytest

from edgeinfer import _core
from edgeinfer.gpu.model_plan import kv_bytes_per_token
from edgeinfer.model import KV_CACHE_TYPES
from edgeinfer.gpu.model_plan import kv_row_bytes, plan_for_file
from edgeinfer.model import KV_CACHE_TYPES
from edgeinfer.quantize.plan import ModelShape


class Metadata(dict):
    """A stand-in for a _core.GgufFile's metadata."""

    def get(self, key, default=None):
        return super().get(key, default)


def test_the_presets_read_per_layer_head_counts_by_their_first_layer():
    shape = ModelShape.from_metadata(Metadata({"general.architecture": "x", "x.block_count": 3,
                                               "x.attention.head_count": 4, "x.attention.head_count_kv": [2, 0, 1]}))
    assert shape == ModelShape("x", n_layer=3, n_head=4, n_head_kv=2)
    assert ModelShape.from_metadata(Metadata({"general.architecture": "x", "x.attention.head_count": 4})) \
        == ModelShape("x", n_layer=0, n_head=4, n_head_kv=4)
    assert ModelShape.from_metadata(Metadata()) == ModelShape("", n_layer=0, n_head=0, n_head_kv=0)


def test_kv_rows_that_do_not_fill_their_blocks_have_no_size():
    assert kv_row_bytes("f16", 100) == 200
    assert kv_row_bytes("q8_0", 64) == 2 * 34 and kv_row_bytes("q4_0", 64) == 2 * 18
    assert kv_row_bytes("q8_0", 100) is None


def test_a_file_without_its_sizes_has_no_kv_estimate_and_no_plan(tmp_path):
    path = tmp_path / "no-heads.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_embedding_length(64)
    writer.add_block_count(2)
    writer.add_feed_forward_length(128)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    file = _core.GgufFile(str(path))
    with pytest.raises(_core.ModelFormatError, match="llama.attention.head_count"):
        file.hparams()
    assert kv_bytes_per_token(file, KV_CACHE_TYPES) is None
    with pytest.raises(_core.ModelFormatError, match="llama.attention.head_count"):
        plan_for_file(file, "all")


@pytest.mark.realmodel
@pytest.mark.parametrize("which", ["smollm2_path", "gemma3_path"])
def test_the_file_reading_agrees_with_the_loaded_model(which, request):
    model = _core.Model(str(request.getfixturevalue(which)))
    hparams = model.gguf.hparams()
    assert hparams["n_layer"] == model.n_layer
    assert hparams["kv_width"] == model.n_head_kv * model.head_dim
    estimate = kv_bytes_per_token(model.gguf, KV_CACHE_TYPES)
    for kv_type in KV_CACHE_TYPES:
        ctx = _core.Context(model, n_ctx=16, type_k=kv_type, type_v=kv_type, rotate_k=False, center_k=False)
        assert estimate[kv_type] == ctx.kv_bytes_per_token
