"""Which conversion a checkpoint gets, by the ``architectures`` entry of its config.json: one class
per family (base.py the llama family's, decoders.py and encoders.py the others')."""
from __future__ import annotations

from typing import Any

from edgeinfer.convert.base import Architecture
from edgeinfer.convert.decoders import (EmbeddingGemma, Gemma3, GptOss, Granite, Lfm2, Lfm2Moe, Phi3, Qwen2, Qwen3,
                                        Qwen3Moe, SmolLM3)
from edgeinfer.convert.encoders import Bert, NomicBert, XLMRoberta
from edgeinfer.errors import ModelFormatError


ARCHITECTURES: dict[str, type[Architecture]] = {
    "LlamaForCausalLM": Architecture,
    "MistralForCausalLM": Architecture,
    "Qwen2ForCausalLM": Qwen2,
    "Qwen3ForCausalLM": Qwen3,
    "Qwen3Model": Qwen3,                 # Qwen3-Embedding's sentence-transformers folder
    "Qwen3MoeForCausalLM": Qwen3Moe,
    "Phi3ForCausalLM": Phi3,
    "Gemma3ForCausalLM": Gemma3,
    "Gemma3TextModel": EmbeddingGemma,
    "SmolLM3ForCausalLM": SmolLM3,
    "GraniteForCausalLM": Granite,
    "Lfm2ForCausalLM": Lfm2,
    "Lfm2MoeForCausalLM": Lfm2Moe,
    "GptOssForCausalLM": GptOss,
    "BertModel": Bert,
    "BertForSequenceClassification": Bert,
    "XLMRobertaModel": XLMRoberta,
    "XLMRobertaForSequenceClassification": XLMRoberta,
    "NomicBertModel": NomicBert,
}


def architecture_for(hf_architecture: str, cfg: dict[str, Any]) -> Architecture:
    cls = ARCHITECTURES.get(hf_architecture)
    if cls is None:
        raise ModelFormatError(f"architecture {hf_architecture!r} cannot be converted yet "
                               f"(supported: {', '.join(ARCHITECTURES)})")
    return cls(cfg)
