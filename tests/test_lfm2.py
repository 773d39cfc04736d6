"""LFM2 (GGUF architecture lfm2) end to end on a tiny random Lfm2ForCausalLM checkpoint (5 layers:
short convolutions around two attention layers, the last a convolution): `edgeinfer convert`
writes llama.cpp's keys and tensors (head_count_kv per layer, 0 for a convolution; shortconv.*;
the final norm as token_embd_norm); edgeinfer's logits match transformers' (float32) for whole
prompts and token by token; a prompt in chunks gives what it gives whole; a decode batch and a
batch of several sequences give each token exactly what it gets alone (the convolution's state
is kept per sequence). What the state cannot do is refused by name, and what it can is checked:
truncating to a shorter prefix, a context shift, a snapshot or copy of a prefix (all
refused); starting afresh, whole snapshots, saved states and sequence copies (carry the state);
the prompt cache decodes a prompt that leaves the cached tokens again from the start. Under
OpenCL offload both kinds of layer go to the device, the convolutions' states kept there, with
the CPU's logits bit for bit, across snapshots and saved states too. llama-perplexity scores a
text on the converted file as edgeinfer does; parallel generations get the tokens each gets alone."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")

from edgeinfer import Model, _core  # noqa: E402
from edgeinfer.cli import main as cli_main  # noqa: E402
from edgeinfer.errors import EdgeInferError  # noqa: E402
from support.hf_compare import check_against_hf  # noqa: E402
from support.hf_tiny import make_tiny_checkpoint, train_sentencepiece  # noqa: E402
from support.opencl_cpu_reference import reference, under_avx2  # noqa: E402

ATTENTION = [False, True, False, True, False]
RECURRENT = "recurrent state"   # every refusal names it


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """(the transformers model, edgeinfer's F32 file of it)."""
    tmp = tmp_path_factory.mktemp("lfm2")
    spm_model = train_sentencepiece(tmp / "spm")
    model = make_tiny_checkpoint(tmp / "hf", "lfm2", spm_model)
    assert cli_main(["convert", str(tmp / "hf"), str(tmp / "model.gguf"), "--outtype", "f32"]) == 0
    return model, tmp / "model.gguf"


@pytest.fixture(scope="module")
def core_model(converted):
    return _core.Model(str(converted[1]))


def _ids(seed: int, n: int, n_vocab: int = 400) -> np.ndarray:
    return np.random.default_rng(seed).integers(3, n_vocab, n).astype(np.int32)


def _one_at_a_time(ctx, tokens: np.ndarray) -> np.ndarray:
    rows = []
    for t in tokens:
        ctx.decode(np.array([t], np.int32))
        rows.append(np.array(ctx.logits[-1]))
    return np.stack(rows)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_converted_file_has_llamacpps_keys_and_tensors(converted):
    _, path = converted
    f = _core.GgufFile(str(path))
    assert f.get("general.architecture") == "lfm2"
    assert list(f.get("lfm2.attention.head_count_kv")) == [2 if a else 0 for a in ATTENTION]
    assert f.get("lfm2.shortconv.l_cache") == 3
    assert f.get("lfm2.feed_forward_length") == 96   # 2/3 of 128, rounded up to 32
    tensors = {t["name"]: t for t in f.tensors()}
    assert "token_embd_norm.weight" in tensors and "output_norm.weight" not in tensors
    assert "output.weight" not in tensors   # tied
    for il, attends in enumerate(ATTENTION):
        assert (f"blk.{il}.attn_q.weight" in tensors) == attends
        assert (f"blk.{il}.shortconv.in_proj.weight" in tensors) == (not attends)
    conv = tensors["blk.0.shortconv.conv.weight"]
    assert list(conv["shape"]) == [3, 64] and conv["type_name"].lower() == "f32"
    assert list(tensors["blk.0.shortconv.in_proj.weight"]["shape"]) == [64, 192]


def test_logits_match_transformers(converted):
    model, path = converted
    check_against_hf(model, path)


def test_prompt_in_chunks_is_the_prompt_whole(core_model):
    prompt = _ids(1, 40)
    whole = _core.Context(core_model, n_ctx=64, n_threads=2)
    whole.decode(prompt, all_logits=True, as_single_steps=True)
    for n_batch in (1, 3, 7):
        chunked = _core.Context(core_model, n_ctx=64, n_threads=2, n_batch=n_batch)
        chunked.decode(prompt, all_logits=True, as_single_steps=True)
        assert _same_bits(np.array(chunked.logits), np.array(whole.logits)), n_batch
    # In llama.cpp's order the batch size picks the matmul's order: equal up to rounding.
    whole.truncate(0)
    whole.decode(prompt, all_logits=True)
    chunked = _core.Context(core_model, n_ctx=64, n_threads=2, n_batch=5)
    chunked.decode(prompt, all_logits=True)
    np.testing.assert_allclose(np.array(chunked.logits), np.array(whole.logits), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("exact", [True, False], ids=["llama.cpp-order", "fast-order"])
def test_batches_give_each_token_what_it_gets_alone(converted, exact):
    """A decode batch (as_single_steps) and a batch of two sequences: each token gets a one-token
    step's bits; whole snapshots and sequence copies carry the convolution state."""
    model = _core.Model(str(converted[1]), exact=exact)
    prompt, new = _ids(1, 30), _ids(2, 9)
    ctx = _core.Context(model, n_ctx=64, n_threads=2)
    ctx.decode(prompt)
    at_prompt = ctx.kv_snapshot(len(prompt))
    alone = _one_at_a_time(ctx, new)
    for n in (2, 5, 9):
        ctx.kv_restore(at_prompt, len(prompt), len(prompt))
        ctx.decode(new[:n], all_logits=True, as_single_steps=True)
        assert _same_bits(np.array(ctx.logits), alone[:n]), n

    seqs = _core.Context(model, n_ctx=64, n_threads=2, n_seq=2)
    seqs.decode_sequences(prompt, np.zeros(len(prompt), np.int32))
    seqs.seq_copy(0, 1, len(prompt))
    # interleaved: each sequence's rows are several runs of the batch
    order = np.array([0, 1, 1, 0, 0, 1, 0, 1], np.int32)
    tokens = np.empty(8, np.int32)
    tokens[order == 0], tokens[order == 1] = new[:4], new[4:8]
    seqs.decode_sequences(tokens, order, logits=np.ones(8, bool))
    got = np.array(seqs.logits)
    assert _same_bits(got[order == 0], alone[:4])
    ctx.kv_restore(at_prompt, len(prompt), len(prompt))
    assert _same_bits(got[order == 1], _one_at_a_time(ctx, new[4:8]))


def test_a_fresh_start_forgets_the_state(core_model):
    prompt = _ids(3, 20)
    ctx = _core.Context(core_model, n_ctx=64, n_threads=2)
    ctx.decode(prompt)
    first = np.array(ctx.logits)
    ctx.decode(_ids(4, 5))
    ctx.truncate(0)
    ctx.decode(prompt)
    assert _same_bits(np.array(ctx.logits), first)


def test_what_would_rewind_or_move_the_state_is_refused_by_name(core_model, tmp_path):
    ctx = _core.Context(core_model, n_ctx=64, n_threads=2, n_seq=2)
    assert ctx.recurrent
    ctx.decode(_ids(5, 20))
    with pytest.raises(EdgeInferError, match=RECURRENT):
        ctx.truncate(10)
    with pytest.raises(EdgeInferError, match=RECURRENT):
        ctx.shift(4, 8)
    with pytest.raises(EdgeInferError, match=RECURRENT):
        ctx.kv_snapshot(10)
    blob = ctx.kv_snapshot(20)
    with pytest.raises(EdgeInferError, match=RECURRENT):
        ctx.kv_restore(blob, 20, 10)
    with pytest.raises(EdgeInferError, match=RECURRENT):
        ctx.save_state(str(tmp_path / "part.state"), _ids(5, 20)[:10])
    with pytest.raises(EdgeInferError, match=RECURRENT):
        ctx.seq_copy(0, 1, 10)
    assert ctx.n_past == 20   # nothing changed
    ctx.truncate(20)          # the end itself is fine


def test_saved_state_continues_as_the_live_context(converted, tmp_path):
    _, path = converted
    a = Model.load(path, n_ctx=64, n_threads=2)
    prompt, more = [int(t) for t in _ids(6, 25)], [int(t) for t in _ids(7, 6)]
    a.prompt_cache.prepare(prompt + [0])
    a.prompt_cache.decode(prompt)
    assert a.prompt_cache.save(tmp_path / "s.state") == len(prompt)
    b = Model.load(path, n_ctx=64, n_threads=2)
    assert b.prompt_cache.load(tmp_path / "s.state") == len(prompt)
    for m in (a, b):
        m.prompt_cache.decode(more, all_logits=True)
    assert _same_bits(np.array(a.context.logits), np.array(b.context.logits))


def test_prompt_cache_decodes_a_diverging_prompt_from_the_start(converted):
    _, path = converted
    m = Model.load(path, n_ctx=128, n_threads=2)
    fresh = Model.load(path, n_ctx=128, n_threads=2)
    base = [int(t) for t in _ids(8, 40)]
    extended = base + [int(t) for t in _ids(9, 5)]
    diverging = base[:20] + [int(t) for t in _ids(10, 10)]
    cache = m.prompt_cache
    cache.decode(base[cache.prepare(base):])
    assert cache.prepare(extended) == len(base)          # the end is reused
    cache.decode(extended[len(base):])
    assert cache.prepare(diverging) == 0                 # a shorter prefix cannot be: from the start
    cache.decode(diverging)
    fresh.prompt_cache.prepare(diverging)
    fresh.prompt_cache.decode(diverging)
    assert _same_bits(np.array(m.context.logits), np.array(fresh.context.logits))
    cache.take_back(3)                                   # decoded again up to the kept tokens
    fresh.prompt_cache.reset()
    fresh.prompt_cache.decode(diverging[:-3])
    assert cache.tokens == diverging[:-3]
    assert _same_bits(np.array(m.context.logits)[-1], np.array(fresh.context.logits)[-1])


def test_context_shift_in_generation_is_refused_by_name(converted):
    _, path = converted
    m = Model.load(path, n_ctx=32, n_threads=2)
    with pytest.raises(EdgeInferError, match=RECURRENT):
        for _ in m.generate([int(t) for t in _ids(11, 20)], max_tokens=40, temperature=0, context_overflow="shift",
                            logit_bias={2: -100.0}):   # no end of generation before the context is full
            pass


def test_info_names_the_architecture_and_its_layer_kinds(converted, capsys):
    _, path = converted
    assert cli_main(["info", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["architecture"] == "lfm2" and info["supported"]
    assert info["layer_kinds"] == {"attention": 2, "short_convolution": 3}
    assert cli_main(["info", str(path)]) == 0
    assert "2 attention, 3 short convolution" in capsys.readouterr().out


OFFLOAD_PROMPTS = [[1, 45, 203, 17, 99, 250, 8, 77, 31, 160], [1, 300, 12, 12, 160, 5]]


@pytest.fixture(scope="module")
def offload_case(converted, tmp_path_factory):
    """(a Q8_0 file of the tiny model, the CPU path's logits for OFFLOAD_PROMPTS under the AVX2
    kernels the device mirrors: tests/test_opencl_offload.py explains the oracle)."""
    q8 = tmp_path_factory.mktemp("lfm2_q8") / "q8_0.gguf"
    assert cli_main(["quantize", str(converted[1]), str(q8), "Q8_0"]) == 0
    ref = reference(q8, OFFLOAD_PROMPTS)
    if ref is None:
        pytest.skip("the device mirrors the x86 AVX2 kernels; this CPU has none to compare with")
    return q8, ref


@pytest.mark.usefixtures("opencl_cache_in_a_temp_folder")
@pytest.mark.parametrize("spec", ["all", "0,2-3"])
def test_offloaded_convolutions_compute_the_cpus_logits(offload_case, device_index, spec):
    """Every layer on the device, or the convolutions 0 and 2 with attention layer 3 there and
    attention layer 1 and convolution 4 on the CPU: the prompt as one batch, then 32 greedy
    tokens one call each (the state carried on the device from step to step), and the prompt
    then the tokens as a second batch give the CPU's logits bit for bit."""
    q8, ref = offload_case
    model = Model.load(q8, n_ctx=256, gpu_layers=spec, device=device_index)
    assert model.placement.gpu_layers == ((0, 1, 2, 3, 4) if spec == "all" else (0, 2, 3))
    # The CPU layers must run the AVX2 kernels the device mirrors: a child process where the
    # best ISA is another one.
    got = under_avx2(q8, OFFLOAD_PROMPTS, gpu_layers=spec, device=device_index)
    for key in ref:
        np.testing.assert_array_equal(got[key], ref[key], err_msg=f"{spec} {key}")


def test_the_placement_costs_a_convolution_layer_its_state(core_model, converted):
    """The plan's cost of a convolution layer (no K/V rows: its state) is what the core keeps."""
    from edgeinfer.gpu.model_plan import conv_state_bytes

    f = _core.GgufFile(str(converted[1]))
    ctx = _core.Context(core_model, n_ctx=8, n_threads=1)
    per_layer = (ctx.kv_bytes - 8 * ctx.kv_bytes_per_token) // len(ATTENTION)   # the host keeps one per layer
    assert conv_state_bytes(f, f.hparams()) == per_layer > 0


@pytest.mark.usefixtures("opencl_cache_in_a_temp_folder")
def test_offloaded_state_goes_through_snapshots_and_saved_states(offload_case, device_index, tmp_path):
    """With every layer on the device the convolution states live there: a snapshot and a saved
    state carry them to the host, a restore carries them back (to this context, after other
    tokens moved its state on, and to a new one), and each continues with the CPU's logits."""
    q8, ref = offload_case
    prompt, ids = OFFLOAD_PROMPTS[0], [int(t) for t in ref["ids0"]]
    a = Model.load(q8, n_ctx=256, gpu_layers="all", device=device_index)
    a.prompt_cache.decode(prompt)
    at_prompt = a._ctx.kv_snapshot(len(prompt))
    assert a.prompt_cache.save(tmp_path / "s.state") == len(prompt)
    a.prompt_cache.decode(_ids(12, 7).tolist())   # moves every state on
    b = Model.load(q8, n_ctx=256, gpu_layers="all", device=device_index)
    assert b.prompt_cache.load(tmp_path / "s.state") == len(prompt)
    a._ctx.kv_restore(at_prompt, len(prompt), len(prompt))
    for ctx in (a._ctx, b._ctx):
        steps = _one_at_a_time(ctx, np.array(ids[:8], np.int32))
        np.testing.assert_array_equal(steps, ref["greedy0"][1:9])


def test_parallel_generations_get_the_tokens_each_gets_alone(converted):
    """Three generations in one context, their steps shared and the long prompt prefilled in
    chunks between the others' steps: each sequence's convolution state stays its own."""
    import threading
    import time

    _, path = converted
    prompts = [[int(t) for t in _ids(20 + i, n)] for i, n in enumerate((12, 45, 20))]
    alone = Model.load(path, n_ctx=128, n_threads=2, n_batch=8)
    want = []
    for p in prompts:
        alone.prompt_cache.reset()
        want.append(alone.complete(p, max_tokens=12, temperature=0).tokens)
    model = Model.load(path, n_ctx=128, n_threads=2, n_batch=8, n_parallel=len(prompts))
    got: list = [None] * len(prompts)

    def work(i: int) -> None:
        # A pause a token, so that the tiny model's generations overlap and share steps.
        got[i] = model.complete(prompts[i], max_tokens=12, temperature=0, prompt_cache=model.prompt_caches[i],
                                on_token=lambda *_: time.sleep(0.01)).tokens

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert got == want
    assert model.batcher.stats.rows > model.batcher.stats.steps   # the generations shared steps


def test_perplexity_is_llama_perplexitys_on_our_file(converted, tmp_path):
    """llama.cpp loads the file `edgeinfer convert` wrote and scores a text as edgeinfer does (each
    chunk a fresh sequence: the convolution state starts empty in both)."""
    from support.llamacpp_venv import assert_perplexity_is_llamacpps
    assert_perplexity_is_llamacpps(converted[1], tmp_path)


def test_bench_at_a_depth_restores_the_state_instead_of_truncating(converted, capsys):
    """`edgeinfer bench -d`: each run goes back to the depth's snapshot (truncating would be
    refused), prompts, single and parallel generations alike."""
    _, path = converted
    assert cli_main(["bench", str(path), "-p", "16", "-n", "4", "-d", "0,20", "-np", "1,2", "-r", "2", "-t", "2",
                     "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {(r["n_depth"], r["n_parallel"]) for r in rows} >= {(20, 1), (20, 2)}


def test_speculative_decoding_gives_the_plain_tokens(converted):
    """Prompt-lookup drafts: a rejected draft cannot be truncated away, so the prompt cache decodes
    the kept tokens again (PromptCache.drop); the tokens are the plain greedy ones."""
    _, path = converted
    m = Model.load(path, n_ctx=200, n_threads=2)
    prompt = [int(t) for t in _ids(3, 30)] * 2   # repeats: the drafter finds guesses
    plain = m.complete(prompt, max_tokens=30, temperature=0, logit_bias={2: -100.0}).tokens
    m.prompt_cache.reset()
    fast = m.complete(prompt, max_tokens=30, temperature=0, logit_bias={2: -100.0}, speculative=True)
    assert fast.tokens == plain
    assert fast.drafts
