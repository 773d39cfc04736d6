"""--prompt-cache-dir on the tiny random model: which prefixes are saved (a diverging shared
prefix, the system prefix after one request, the last conversation at shutdown), reloading them
into a fresh model, moving corrupt files aside and saving them again, and the byte budget."""
from __future__ import annotations

import logging

from edgeinfer.model import Model
from edgeinfer.server.prompt_store import PromptStateStore, state_name
from edgeinfer.server.config import DEFAULT_PROMPT_CACHE_BYTES

SHARED = list(range(10, 50))   # a 40-token "system prompt"


def make_store(model: Model, root, min_tokens: int = 32, max_bytes: int = DEFAULT_PROMPT_CACHE_BYTES):
    return PromptStateStore(model, root, min_tokens=min_tokens, max_bytes=max_bytes)


def serve(model: Model, store: PromptStateStore, prompt: list[int]):
    """What the engine does for one request."""
    saved = store.before_generate(model.prompt_cache, prompt)
    return saved, model.complete(prompt, max_tokens=3, temperature=0)


def test_a_prefix_shared_by_two_diverging_prompts_is_saved_once(tiny_llama_path, tmp_path):
    model = Model.load(tiny_llama_path, n_ctx=128)
    store = make_store(model, tmp_path)
    assert serve(model, store, SHARED + [60, 61])[0] is None          # nothing shared yet
    saved, result = serve(model, store, SHARED + [70, 71])              # shares SHARED, then diverges
    assert saved is not None and saved.name.startswith("40-") and result.cached_tokens == 40
    # A conversation that continues (shares everything cached) is not saved every turn.
    assert serve(model, store, SHARED + [70, 71] + result.tokens + [80])[0] is None
    assert len(store.files()) == 1
    # Short shared prefixes are not worth a file.
    assert serve(model, store, [5, 6, 7, 8, 9])[0] is None and len(store.files()) == 1


def test_saved_prefixes_are_reloaded_by_a_fresh_model(tiny_llama_path, tmp_path):
    first = Model.load(tiny_llama_path, n_ctx=128)
    store = make_store(first, tmp_path)
    serve(first, store, SHARED + [60])
    serve(first, store, SHARED + [61])
    expected = first.complete(SHARED + [62], max_tokens=4, temperature=0).tokens
    fresh = Model.load(tiny_llama_path, n_ctx=128)
    assert make_store(fresh, tmp_path).load_all() == 1
    fresh.prompt_cache.reset()   # only the snapshot remains
    result = fresh.complete(SHARED + [62], max_tokens=4, temperature=0)
    assert result.cached_tokens == 40 and result.tokens == expected


def test_a_corrupt_file_is_moved_aside_and_its_prefix_saved_again(tiny_llama_path, tmp_path, caplog):
    model = Model.load(tiny_llama_path, n_ctx=128)
    store = make_store(model, tmp_path)
    serve(model, store, SHARED + [60])
    saved = serve(model, store, SHARED + [61])[0]
    data = bytearray(saved.read_bytes())
    data[-100] ^= 0xFF                                   # one flipped byte in the KV rows
    saved.write_bytes(bytes(data))
    fresh = Model.load(tiny_llama_path, n_ctx=128)
    restarted = make_store(fresh, tmp_path)
    with caplog.at_level(logging.WARNING, logger="edgeinfer.server"):
        assert restarted.load_all() == 0
    assert "checksum" in caplog.text and saved.name in caplog.text
    assert not saved.exists() and saved.with_name(saved.name + ".corrupt").exists()
    # The next time the prefix is used, it is saved again, and the next start loads it.
    serve(fresh, restarted, SHARED + [60])
    assert serve(fresh, restarted, SHARED + [61])[0] == saved and saved.exists()
    assert make_store(Model.load(tiny_llama_path, n_ctx=128), tmp_path).load_all() == 1


def test_a_state_longer_than_the_context_is_left_for_a_larger_one(tiny_llama_path, tmp_path):
    model = Model.load(tiny_llama_path, n_ctx=128)
    store = make_store(model, tmp_path)
    long_prefix = list(range(10, 90))                    # 80 tokens
    serve(model, store, long_prefix + [1])
    saved = serve(model, store, long_prefix + [2])[0]
    assert make_store(Model.load(tiny_llama_path, n_ctx=64), tmp_path).load_all() == 0
    assert saved.exists()                                # not moved aside: it is not corrupt
    assert make_store(Model.load(tiny_llama_path, n_ctx=128), tmp_path).load_all() == 1


def test_the_system_prefix_is_saved_after_the_first_request(tiny_llama_path, tmp_path):
    model = Model.load(tiny_llama_path, n_ctx=128)
    store = make_store(model, tmp_path)
    prompt = SHARED + [60, 61]
    serve(model, store, prompt)
    assert store.after_generate(model.prompt_cache, prompt, keep=len(SHARED)).name == state_name(SHARED)
    assert store.after_generate(model.prompt_cache, prompt, keep=10) is None      # shorter than min_tokens
    fresh = Model.load(tiny_llama_path, n_ctx=128)
    assert make_store(fresh, tmp_path).load_all() == 1
    fresh.prompt_cache.reset()
    assert fresh.complete(SHARED + [70], max_tokens=2, temperature=0).cached_tokens == len(SHARED)


def test_the_last_conversation_is_saved_at_shutdown(tiny_llama_path, tmp_path):
    model = Model.load(tiny_llama_path, n_ctx=128)
    store = make_store(model, tmp_path)
    prompt = SHARED + [60, 61]
    _, result = serve(model, store, prompt)
    saved = store.save_live(model.prompt_cache)
    conversation = prompt + result.tokens[:-1]   # the last token was sampled, never decoded
    assert saved.name == state_name(conversation)
    fresh = Model.load(tiny_llama_path, n_ctx=128)
    make_store(fresh, tmp_path).load_all()
    fresh.prompt_cache.reset()
    assert fresh.complete(conversation + [5, 6], max_tokens=2, temperature=0).cached_tokens == len(conversation)


def test_the_folder_stays_within_its_byte_budget_least_recently_used_first_out(tiny_llama_path, tmp_path):
    model = Model.load(tiny_llama_path, n_ctx=128)
    one_file = model.context.kv_bytes_for(len(SHARED) + 1) + 4096
    store = make_store(model, tmp_path, max_bytes=2 * one_file)
    for head in (100, 150, 200):   # three different shared prefixes, each seen twice
        prefix = [head] + SHARED
        serve(model, store, prefix + [1])
        serve(model, store, prefix + [2])
    assert [p.name for p in store.files()] == [state_name([150] + SHARED), state_name([200] + SHARED)]


def test_models_and_kv_types_get_their_own_folders(tiny_llama_path, tmp_path):
    a = make_store(Model.load(tiny_llama_path, n_ctx=128), tmp_path)
    b = make_store(Model.load(tiny_llama_path, n_ctx=128, cache_type_k="q8_0"), tmp_path)
    assert a.folder != b.folder and a.folder.parent == b.folder.parent == tmp_path
