"""Hostile-input test of the whole load path: a few hundred mutated tiny models (BPE and SPM
vocabularies, F32 and quantized weights) through Model.load, tokenize, detokenize, one decode
step and the chat prompt. Each must succeed or raise an EdgeInferError / ValueError -- never
crash, hang, exhaust memory or raise anything else. The CI-sized cut of scripts/fuzz_gguf.py
(same mutations, same child), plus the variants that run found broken, kept as regressions.
"""
from __future__ import annotations

import collections

import pytest

from support.fuzz_runner import is_failure, run_variants
from support.gguf_mutate import KINDS, VT, add_kvs, enc_str, set_kv
from support.model_fuzz import make_model_bases, variant

SEED = 20250219
N_VARIANTS = 400


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    return make_model_bases(tmp_path_factory.mktemp("bases"))


def _run(tmp_path, variants):
    items = [(i, str(v.write(tmp_path / f"v{i:04d}.gguf"))) for i, v in enumerate(variants)]
    results, notes = run_variants(items, "model")
    return [results[i] for i in range(len(variants))], notes


def test_mutated_models_load_or_raise_edgeinfer_errors(bases, tmp_path):
    drawn = [variant(bases, SEED, i) for i in range(N_VARIANTS)]
    results, notes = _run(tmp_path, [v for _, v in drawn])
    failures = [f"#{i} {base.name} {v.kind}: {v.label} -> {r}"
                for i, ((base, v), r) in enumerate(zip(drawn, results)) if is_failure("model", r)]
    assert not failures + notes, f"{len(failures)} of {N_VARIANTS} variants misbehaved:\n" + "\n".join(
        (failures + notes)[:30])

    # The draw covers every kind and base, and the variants reach every stage: some are rejected
    # at load, some load and run to the end.
    assert {v.kind for _, v in drawn} == set(KINDS)
    assert {base.name for base, _ in drawn} == {base.name for base in bases}
    outcomes = collections.Counter(r.outcome for r in results)
    assert outcomes["format_error"] > N_VARIANTS // 4
    assert outcomes["ok"] > N_VARIANTS // 10


# Variants the long run found broken, each with the outcome it must have now. Strings from the
# file quoted in a message were passed through as they were: bytes that are not UTF-8 made
# Python raise UnicodeDecodeError in place of the error, a NUL cut the message short.
def _architecture(name: bytes):
    return lambda base: set_kv(base, "general.architecture", VT.STRING, name)


def _tokenizer_model(name: bytes):
    return lambda base: set_kv(base, "tokenizer.ggml.model", VT.STRING, name)


def _pre_tokenizer(name: bytes):
    return lambda base: set_kv(base, "tokenizer.ggml.pre", VT.STRING, name)


def _duplicate_token(base):
    """Tokens 5 and 6 both "\x00\xff"."""
    kv = base.kvs["tokenizer.ggml.tokens"]
    (a, _), (_, b) = kv.elems[5], kv.elems[6]
    return base.variant("array_elem", "tokens 5, 6 = '\\x00\\xff'", head=base.splice(a, b, enc_str(b"\0\xff") * 2))


def _rope_scaling(base):
    """An unsupported rope scaling type (with a factor, so that it matters) named in bytes."""
    return base.variant("kv_add", "rope scaling", head=add_kvs(base, [
        ("llama.rope.scaling.type", VT.STRING, b"\0yarn\xff"), ("llama.rope.scaling.factor", VT.FLOAT32, 4.0)]))


def _chat_template_not_a_string(base):
    return set_kv(base, "tokenizer.chat_template", VT.INT64, 2)


REGRESSIONS = [
    # (make the variant, base, outcome, stage, text the message must contain)
    (_architecture(b"\xc3"), "llama-bpe-f32", "error", "load", "architecture '\\xc3' is not supported"),
    (_architecture(b"\0x"), "llama-bpe-f32", "error", "load", "architecture '\\x00x' is not supported"),
    (_tokenizer_model(b"\xe2\x96"), "gemma3-spm-f32", "error", "load", "tokenizer model '\\xe2\\x96'"),
    (_pre_tokenizer(b"\x044h\xd9"), "llama-bpe-f32", "error", "load", "pre-tokenizer '\\x044h\\xd9'"),
    (_duplicate_token, "llama-bpe-f32", "format_error", "load", "duplicate token '\\x00\\xff' (ids 5 and 6)"),
    (_rope_scaling, "llama-bpe-f32", "format_error", "load", "rope scaling '\\x00yarn\\xff' is not supported"),
    (_chat_template_not_a_string, "gemma3-spm-f32", "format_error", "chat",
     "tokenizer.chat_template': has type int64, expected a string"),
]


def test_variants_found_by_the_long_run_raise_clear_errors(bases, tmp_path):
    by_name = {base.name: base for base in bases}
    variants = [make(by_name[base]) for make, base, *_ in REGRESSIONS]
    results, notes = _run(tmp_path, variants)
    assert not notes
    for v, (_, _, outcome, stage, text), r in zip(variants, REGRESSIONS, results):
        assert (r.outcome, r.stage) == (outcome, stage), f"{v.label}: {r}"
        assert text in r.message, f"{v.label}: {r.message}"
