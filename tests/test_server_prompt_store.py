"""--prompt-cache-dir on the tiny random model: which prefixes are saved, reloading them into a
fresh model, skipping files that do not fit, and the file limit."""
from __future__ import annotations

import logging

import pytest

from edgeinfer.model import Model
from edgeinfer.server.prompt_store import PromptStateStore, state_name
from tiny_model import TinyConfig, write_tiny_llama

SHARED = list(range(10, 50))   # a 40-token "system prompt"


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("store") / "tiny.gguf"
    write_tiny_llama(path, TinyConfig())
    return path


def serve(model: Model, store: PromptStateStore, prompt: list[int]):
    """What the engine does for one request."""
    saved = store.before_generate(prompt)
    return saved, model.complete(prompt, max_tokens=3, temperature=0)


def test_a_prefix_shared_by_two_diverging_prompts_is_saved_once(model_path, tmp_path):
    model = Model.load(model_path, n_ctx=128)
    store = PromptStateStore(model, tmp_path, min_tokens=32)
    assert serve(model, store, SHARED + [60, 61])[0] is None          # nothing shared yet
    saved, result = serve(model, store, SHARED + [70, 71])              # shares SHARED, then diverges
    assert saved is not None and saved.name.startswith("40-") and result.cached_tokens == 40
    # A conversation that continues (shares everything cached) is not saved every turn.
    assert serve(model, store, SHARED + [70, 71] + result.tokens + [80])[0] is None
    assert len(store.files()) == 1
    # Short shared prefixes are not worth a file.
    assert serve(model, store, [5, 6, 7, 8, 9])[0] is None and len(store.files()) == 1


def test_saved_prefixes_are_reloaded_by_a_fresh_model(model_path, tmp_path):
    first = Model.load(model_path, n_ctx=128)
    store = PromptStateStore(first, tmp_path, min_tokens=32)
    serve(first, store, SHARED + [60])
    serve(first, store, SHARED + [61])
    expected = first.complete(SHARED + [62], max_tokens=4, temperature=0).tokens
    fresh = Model.load(model_path, n_ctx=128)
    assert PromptStateStore(fresh, tmp_path, min_tokens=32).load_all() == 1
    fresh.prompt_cache.reset()   # only the snapshot remains
    result = fresh.complete(SHARED + [62], max_tokens=4, temperature=0)
    assert result.cached_tokens == 40 and result.tokens == expected


def test_files_that_do_not_fit_are_skipped(model_path, tmp_path, caplog):
    model = Model.load(model_path, n_ctx=128)
    store = PromptStateStore(model, tmp_path, min_tokens=32)
    serve(model, store, SHARED + [60])
    serve(model, store, SHARED + [61])
    (store.folder / "1-garbage.eistate").write_bytes(b"not a state file")
    fresh = Model.load(model_path, n_ctx=128)
    with caplog.at_level(logging.WARNING, logger="edgeinfer.server"):
        assert PromptStateStore(fresh, tmp_path, min_tokens=32).load_all() == 1
    assert "1-garbage.eistate" in caplog.text


def test_at_most_max_files_are_kept_least_recently_used_first_out(model_path, tmp_path):
    model = Model.load(model_path, n_ctx=128)
    store = PromptStateStore(model, tmp_path, min_tokens=32, max_files=2)
    for head in (100, 150, 200):   # three different shared prefixes, each seen twice
        prefix = [head] + SHARED
        serve(model, store, prefix + [1])
        serve(model, store, prefix + [2])
    assert [p.name for p in store.files()] == [state_name([150] + SHARED), state_name([200] + SHARED)]


def test_models_and_kv_types_get_their_own_folders(model_path, tmp_path):
    a = PromptStateStore(Model.load(model_path, n_ctx=128), tmp_path, min_tokens=32)
    b = PromptStateStore(Model.load(model_path, n_ctx=128, cache_type_k="q8_0"), tmp_path, min_tokens=32)
    assert a.folder != b.folder and a.folder.parent == b.folder.parent == tmp_path
