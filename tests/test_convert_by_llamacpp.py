"""Files written by llama.cpp's own converter (convert_hf_to_gguf.py of the llama.cpp source tree
scripts/llamacpp_bin.py unpacks; skipped without it) from tiny SmolLM3, Granite, Qwen 3 MoE, gpt-oss and
LFM2 and LFM2-MoE checkpoints: edgeinfer loads them and computes transformers' logits, and the very logits of the file
`edgeinfer convert` writes from the same checkpoint (the same tensors and keys)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from edgeinfer import Model  # noqa: E402
from edgeinfer.convert import convert_checkpoint  # noqa: E402
from support.hf_compare import PROMPTS, check_against_hf  # noqa: E402
from support.hf_tiny import make_tiny_checkpoint, train_sentencepiece  # noqa: E402
from support.llamacpp_venv import llamacpp_converter, start_llamacpp_converter  # noqa: E402

CONVERTER = llamacpp_converter()
pytestmark = [pytest.mark.skipif(CONVERTER is None, reason="no llama.cpp source tree (scripts/llamacpp_bin.py "
                                                           "unpacks one)"),
              pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")]

FAMILIES = ["smollm3", "granite", "qwen3moe", "gptoss", "lfm2", "lfm2moe"]
# The GGUF architecture of a family whose tiny-checkpoint name differs from it.
GGUF_ARCH = {"gptoss": "gpt-oss"}
# Checkpoint seeds other than 0: Qwen 3 MoE's seed 0 has a router near-tie that the F16 KV cache's
# rounding decides against transformers (tests/test_qwen3moe.py, HF_SEED).
SEEDS = {"qwen3moe": 2}
# llama.cpp's Qwen 3 MoE, gpt-oss, LFM2 and LFM2-MoE converters read only a BPE tokenizer.json whose pre-tokenizer
# hash they know; the tiny checkpoints carry a SentencePiece model. For those families the converter
# runs with the dense Qwen 3 converter's vocabulary step (SentencePiece first) patched in: the tensors
# and keys under test are its own.
SPM_VOCAB = {"qwen3moe": "conversion.qwen:Qwen3MoeModel", "gptoss": "conversion.gpt_oss:GptOssModel",
             "lfm2": "conversion.lfm2:LFM2Model", "lfm2moe": "conversion.lfm2:LFM2MoeModel"}
RUN_PATCHED = """
import importlib, runpy, sys
converter, where = sys.argv[1], sys.argv[2]
sys.path.insert(0, converter.rsplit("/", 1)[0])
module, cls = where.split(":")
setattr(getattr(importlib.import_module(module), cls), "set_vocab", lambda self: self._set_vocab_sentencepiece())
sys.argv = [converter] + sys.argv[3:]
runpy.run_path(converter, run_name="__main__")
"""


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """family -> (the transformers model, llama.cpp's F32 file, edgeinfer's F32 file). The two
    converter runs (mostly importing torch) go side by side."""
    tmp = tmp_path_factory.mktemp("llamacpp-convert")
    spm_model = train_sentencepiece(tmp / "spm")
    runs, out = {}, {}
    for family in FAMILIES:
        hf = tmp / family
        model = make_tiny_checkpoint(hf, family, spm_model, seed=SEEDS.get(family, 0))
        theirs, ours = tmp / f"{family}-llamacpp.gguf", tmp / f"{family}-edgeinfer.gguf"
        runs[family] = start_llamacpp_converter(CONVERTER, hf, theirs, run_as=(RUN_PATCHED, SPM_VOCAB[family])
                                                if family in SPM_VOCAB else None)
        convert_checkpoint(hf, ours, "f32")
        out[family] = model, theirs, ours
    for family, run in runs.items():
        log, _ = run.communicate(timeout=300)
        assert run.returncode == 0, f"{family}: convert_hf_to_gguf.py failed:\n{log[-3000:]}"
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_llamacpp_converted_file_gives_transformers_logits(converted, family):
    model, theirs, ours = converted[family]
    assert Model.load(theirs, n_ctx=256).metadata["general.architecture"] == GGUF_ARCH.get(family, family)
    check_against_hf(model, theirs, prompts=PROMPTS[:1], decode=False)   # ours is decoded in test_convert_hf.py
    a, b = (Model.load(p, n_ctx=256, n_threads=2) for p in (theirs, ours))
    ids = a.tokenize(PROMPTS[1])
    assert ids == b.tokenize(PROMPTS[1])
    np.testing.assert_array_equal(a.eval_logits(ids), b.eval_logits(ids))
