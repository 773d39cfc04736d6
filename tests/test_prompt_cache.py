"""Prefix reuse with several cached prefixes: alternating conversations stay warm, reused
generations equal cold ones token for token (greedy), and snapshots stay within their budget."""
from __future__ import annotations

from edgeinfer.model import Model

SYSTEM_A = list(range(40, 100))     # two "system prompts" of 60 tokens
SYSTEM_B = list(range(140, 200))


def cold(path, prompt, n=8) -> list[int]:
    m = Model.load(path, n_ctx=256, n_threads=2, snapshot_budget=0)
    return m.complete(prompt, max_tokens=n, temperature=0).tokens


def test_alternating_conversations_both_stay_warm(tiny_llama_path):
    m = Model.load(tiny_llama_path, n_ctx=256, n_threads=2)
    a1, b1 = SYSTEM_A + [5, 6, 7], SYSTEM_B + [8, 9]
    ra1 = m.complete(a1, max_tokens=8, temperature=0)
    rb1 = m.complete(b1, max_tokens=8, temperature=0)
    assert (ra1.cached_tokens, rb1.cached_tokens) == (0, 0)
    # Follow-up turns: each conversation so far plus a new message.
    a2 = a1 + ra1.tokens + [11, 12, 13]
    b2 = b1 + rb1.tokens + [14, 15]
    ra2 = m.complete(a2, max_tokens=8, temperature=0)
    assert m.prompt_cache.restored_from_snapshot
    # (8 tokens, length-limited: the last sampled token was never decoded)
    assert ra2.cached_tokens == len(a1) + len(ra1.tokens) - 1
    rb2 = m.complete(b2, max_tokens=8, temperature=0)
    assert rb2.cached_tokens == len(b1) + len(rb1.tokens) - 1
    # And back again to A's first turn: a prefix of the snapshot of A's second turn.
    ra1_again = m.complete(a1, max_tokens=8, temperature=0)
    assert ra1_again.cached_tokens == len(a1) - 1
    for prompt, got in [(a1, ra1), (b1, rb1), (a2, ra2), (b2, rb2), (a1, ra1_again)]:
        assert got.tokens == cold(tiny_llama_path, prompt)


def test_live_context_is_preferred_when_it_shares_more(tiny_llama_path):
    m = Model.load(tiny_llama_path, n_ctx=256, n_threads=2)
    r = m.complete(SYSTEM_A + [1, 2], max_tokens=4, temperature=0)
    live = list(m.prompt_cache.tokens)   # the prompt and the generated tokens that were decoded
    r2 = m.complete(SYSTEM_A + [1, 2] + r.tokens + [3], max_tokens=4, temperature=0)
    assert not m.prompt_cache.restored_from_snapshot
    assert r2.cached_tokens == len(live) >= len(SYSTEM_A) + 2
    assert m.prompt_cache.snapshots == []   # nothing sizeable was thrown away


def test_snapshots_are_evicted_least_recently_used_within_the_budget(tiny_llama_path):
    m = Model.load(tiny_llama_path, n_ctx=256, n_threads=2)
    per_token = m.kv_bytes_per_token
    m.prompt_cache.snapshot_budget = 150 * per_token   # room for two 63-token prefixes, not three
    convs = [base + [3, 4, 5] for base in (SYSTEM_A, SYSTEM_B, list(range(200, 260)))]
    for c in convs:
        m.complete(c, max_tokens=1, temperature=0)
    m.complete([7] * 40, max_tokens=1, temperature=0)  # pushes the third conversation out too
    cache = m.prompt_cache
    assert cache.snapshot_bytes <= cache.snapshot_budget
    kept = [list(t[:60]) for t in cache.snapshots]
    assert kept == [SYSTEM_B, list(range(200, 260))]   # A, the oldest, was evicted
    r = m.complete(convs[0] + [9], max_tokens=4, temperature=0)
    assert r.cached_tokens == 0 and r.tokens == cold(tiny_llama_path, convs[0] + [9], 4)
    # That turn pushed the live 40-token prompt into the snapshots and B out; C is still warm.
    assert [len(t) for t in cache.snapshots] == [63, 40]
    r = m.complete(convs[2] + [9], max_tokens=4, temperature=0)
    assert r.cached_tokens == len(convs[2]) and r.tokens == cold(tiny_llama_path, convs[2] + [9], 4)


def test_a_snapshot_bigger_than_the_budget_is_not_kept(tiny_llama_path):
    m = Model.load(tiny_llama_path, n_ctx=256, n_threads=2, snapshot_budget=10 * 1024)
    m.complete(SYSTEM_A, max_tokens=1, temperature=0)
    m.complete(SYSTEM_B, max_tokens=1, temperature=0)
    assert m.prompt_cache.snapshots == [] and m.prompt_cache.snapshot_bytes == 0


def test_a_shared_snapshot_store_takes_lookups_and_additions_from_many_threads():
    """The server's slots share one store, each from its own thread: a lookup must never see the
    store change under it (it once raised "OrderedDict mutated during iteration")."""
    import sys
    import threading

    import numpy as np

    from edgeinfer.prompt_cache import SnapshotStore

    store = SnapshotStore(budget=40 * 8)   # room for 40 snapshots of 8 bytes: additions also evict
    errors: list[BaseException] = []
    stop = threading.Event()

    def add(first: int) -> None:
        try:
            for i in range(4000):
                store.add((first, i % 97, i), np.zeros(1, np.float64))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    def look() -> None:
        try:
            while not stop.is_set():
                store.best_match([1, 2, 3], 3, 0)
                store.covers((2, 5))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)   # switch threads as often as possible
    try:
        lookers = [threading.Thread(target=look) for _ in range(2)]
        adders = [threading.Thread(target=add, args=(k,)) for k in range(2)]
        for t in lookers + adders:
            t.start()
        for t in adders:
            t.join()
        stop.set()
        for t in lookers:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors[0]
    assert len(store.keys) <= 40
