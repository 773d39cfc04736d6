"""Files written by edgeinfer convert load in llama.cpp and compute the same logits there: tiny
Llama, Qwen 2, Qwen 3, Phi-3 (also with LongRoPE), Gemma 3, SmolLM3 and Granite checkpoints built
with transformers, converted to F32, evaluated by llama-cpp-python in its own virtual environment
(scripts/bench_compare.py makes it; the test is skipped without it) and by edgeinfer."""
from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from edgeinfer import Model  # noqa: E402
from edgeinfer.convert import convert_checkpoint  # noqa: E402
from support.hf_tiny import make_tiny_checkpoint, train_sentencepiece  # noqa: E402
from support.llamacpp_venv import BENCH_PYTHON, has_llama_cpp  # noqa: E402


# Evaluates ids with llama.cpp and saves every position's logits: [n][n_vocab] float32.
_LLAMACPP_LOGITS = """
import json, sys
import numpy as np
import llama_cpp
model = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=256, n_batch=256, logits_all=True, n_threads=2, flash_attn=True,
                        verbose=False)
ids = json.loads(sys.argv[2])
model.eval(ids)
np.save(sys.argv[3], np.array(model.scores[:len(ids)], dtype=np.float32))
"""


pytestmark = pytest.mark.skipif(not has_llama_cpp(),
                                reason="no llama-cpp-python build (scripts/bench_compare.py installs one)")


# Phi-3 with LongRoPE: both engines take the long factors (a context of 256 over an original 64)
# and scale cos/sin by the attention factor.
LONGROPE = {"max_position_embeddings": 256, "original_max_position_embeddings": 64,
            "rope_parameters": {"rope_type": "longrope", "rope_theta": 10000.0,
                                "long_factor": [1.0 + 0.5 * i for i in range(8)],
                                "short_factor": [1.0 + 0.1 * i for i in range(8)]}}
CASES = {"llama": ("llama", {}), "qwen2": ("qwen2", {}), "qwen3": ("qwen3", {}), "phi3": ("phi3", {}),
         "phi3-longrope": ("phi3", LONGROPE), "gemma3": ("gemma3", {}), "smollm3": ("smollm3", {}),
         "granite": ("granite", {})}


@pytest.mark.parametrize("case", list(CASES))
def test_llamacpp_loads_the_converted_file_and_agrees(case, tmp_path):
    family, overrides = CASES[case]
    spm_model = train_sentencepiece(tmp_path / "spm")
    make_tiny_checkpoint(tmp_path / "hf", family, spm_model, **overrides)
    out = tmp_path / "model.gguf"
    convert_checkpoint(tmp_path / "hf", out, "f32")
    ours = Model.load(out, n_ctx=256, n_threads=2)
    ids = ours.tokenize("The quick brown fox jumps over the lazy dog. Hello, world! 12345")
    subprocess.run([str(BENCH_PYTHON), "-c", _LLAMACPP_LOGITS, str(out), json.dumps(ids), str(tmp_path / "l.npy")],
                   check=True, capture_output=True, timeout=300)
    theirs = np.load(tmp_path / "l.npy")
    mine = ours.eval_logits(ids)
    # The same graph (flash attention over an F16 KV cache); this build's kernels round a little
    # differently from ours (measured: 0.02-0.08% of the logits' range).
    print(case, "max abs diff", np.abs(mine - theirs).max(), "of", np.abs(theirs).max())
    assert np.abs(mine - theirs).max() <= 2e-3 * np.abs(theirs).max()
    assert (mine.argmax(axis=1) == theirs.argmax(axis=1)).mean() >= 0.9
