"""The complete models the Model.load fuzz mutates, and the seeded draw of one variant, shared by
tests/test_model_load_fuzz.py and scripts/fuzz_gguf.py.

Bases: the tiny random-weight llama (byte-level BPE vocabulary, `gpt2`) and gemma3
(SentencePiece vocabulary, `llama`), each in F32 and in a quantized type (the CPU repacks some
at load), each given a chat template; and, when the file is present, the real SmolLM2's header,
metadata and tensor table (49k tokens, 49k merges, its chat template) over zeroed weights.
Variant `index` of seed `seed` depends on nothing else, so any one can be re-made alone.
"""
from __future__ import annotations

import random
from pathlib import Path

from support.gguf_mutate import VT, Base, Variant, add_kvs, draw, load_base
from support.tiny_gemma3 import TinyGemma3Config, write_tiny_gemma3
from support.tiny_llama import TinyConfig, write_tiny_llama

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
GEMMA = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}"
         "<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


def _with_template(name: str, path: Path, template: str) -> Base:
    """`path` given a tokenizer.chat_template, parsed again."""
    base = load_base(name, path)
    base.variant("", "", head=add_kvs(base, [("tokenizer.chat_template", VT.STRING, template)])).write(path)
    return load_base(name, path)


def make_model_bases(folder: Path, smollm2: Path | None = None) -> list[Base]:
    """Writes the tiny models into `folder` and parses them (and SmolLM2's header, if given)."""
    bases = []
    for name, cfg in (("llama-bpe-f32", TinyConfig()),
                      ("llama-bpe-q4_1-tied", TinyConfig(weight_type="Q4_1", tied_output=True, rope_freq_factors=True))):
        write_tiny_llama(folder / f"{name}.gguf", cfg)
        bases.append(_with_template(name, folder / f"{name}.gguf", CHATML))
    for name, cfg in (("gemma3-spm-f32", TinyGemma3Config()), ("gemma3-spm-q8_0", TinyGemma3Config(weight_type="Q8_0"))):
        write_tiny_gemma3(folder / f"{name}.gguf", cfg)
        bases.append(_with_template(name, folder / f"{name}.gguf", GEMMA))
    if smollm2 is not None:
        bases.append(load_base("smollm2-header", smollm2, sparse_tail=True))
    return bases


def variant(bases: list[Base], seed: int, index: int) -> tuple[Base, Variant]:
    """Variant `index` of the run seeded `seed`: a base and a kind drawn by weight, then the mutation."""
    rng = random.Random(f"{seed}/{index}")
    base = rng.choice(bases)
    return base, draw(rng, base)
