"""Files written by llama.cpp's own converter (convert_hf_to_gguf.py of the llama.cpp source tree
scripts/llamacpp_bin.py unpacks; skipped without it) from tiny SmolLM3 and Granite checkpoints:
edgeinfer loads them and computes transformers' logits, and the very logits of the file
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

FAMILIES = ["smollm3", "granite"]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """family -> (the transformers model, llama.cpp's F32 file, edgeinfer's F32 file). The two
    converter runs (mostly importing torch) go side by side."""
    tmp = tmp_path_factory.mktemp("llamacpp-convert")
    spm_model = train_sentencepiece(tmp / "spm")
    runs, out = {}, {}
    for family in FAMILIES:
        hf = tmp / family
        model = make_tiny_checkpoint(hf, family, spm_model)
        theirs, ours = tmp / f"{family}-llamacpp.gguf", tmp / f"{family}-edgeinfer.gguf"
        runs[family] = start_llamacpp_converter(CONVERTER, hf, theirs)
        convert_checkpoint(hf, ours, "f32")
        out[family] = model, theirs, ours
    for family, run in runs.items():
        log, _ = run.communicate(timeout=300)
        assert run.returncode == 0, f"{family}: convert_hf_to_gguf.py failed:\n{log[-3000:]}"
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_llamacpp_converted_file_gives_transformers_logits(converted, family):
    model, theirs, ours = converted[family]
    assert Model.load(theirs, n_ctx=256).metadata["general.architecture"] == family
    check_against_hf(model, theirs, prompts=PROMPTS[:1], decode=False)   # ours is decoded in test_convert_hf.py
    a, b = (Model.load(p, n_ctx=256, n_threads=2) for p in (theirs, ours))
    ids = a.tokenize(PROMPTS[1])
    assert ids == b.tokenize(PROMPTS[1])
    np.testing.assert_array_equal(a.eval_logits(ids), b.eval_logits(ids))
