"""The BERT family's encoders (BERT, XLM-RoBERTa, nomic-bert) as llama.cpp's converter writes
them: no causal mask, LayerNorm, token types, and a pooling or a classifier head."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gguf import MODEL_ARCH, GGUFWriter, PoolingType

from edgeinfer.convert.base import Architecture, config_value
from edgeinfer.convert.vocab import Vocabulary, load_unigram_vocabulary
from edgeinfer.errors import ModelFormatError


class Bert(Architecture):
    """BERT encoders (bge, all-MiniLM, e5: BertModel; cross-encoders: BertForSequenceClassification)
    as llama.cpp's converter writes them (conversion/bert.py): no RoPE, LayerNorm epsilon,
    causal_attention false, the token-type count; the "bert." prefix and the pooler dropped (its
    pooling is <arch>.pooling_type, written from the sentence-transformers folder). A classifier
    that is one projection ("classifier") becomes cls.output, as llama.cpp renames it.

    A cross-encoder (BertForSequenceClassification) scores pooler(CLS) = tanh(dense · CLS + b)
    through the classifier: here its pooler is kept as cls.weight / cls.bias, which is what rank
    pooling computes (llama.cpp's converter drops the pooler of every BERT, so its files of these
    models score the CLS row without it), and the pooling is rank."""
    arch = MODEL_ARCH.BERT
    permute_qk = False
    rope_types = ("default",)
    _dropped = ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias")

    def __init__(self, cfg: dict[str, Any]):
        super().__init__(cfg)
        self.classifier = any(a.endswith("ForSequenceClassification") for a in cfg.get("architectures") or [])
        self.pooling = PoolingType.RANK if self.classifier else None

    def context_length(self) -> int:
        return int(config_value(self.cfg, "max_position_embeddings"))

    def write_metadata(self, w: GGUFWriter) -> None:
        c = self.cfg
        w.add_context_length(self.context_length())
        w.add_embedding_length(self.n_embd)
        w.add_feed_forward_length(int(config_value(c, "intermediate_size")))
        w.add_block_count(self.n_layer)
        w.add_head_count(self.n_head)
        w.add_layer_norm_eps(float(c.get("layer_norm_eps", 1e-12)))
        w.add_causal_attention(False)
        w.add_token_type_count(int(c.get("type_vocab_size", 1)))
        w.add_vocab_size(int(config_value(c, "vocab_size")))
        labels = self.output_labels()
        if labels:
            w.add_classifier_output_labels(labels)

    def output_labels(self) -> list[str] | None:
        """A classifier's label names (id2label by id), as llama.cpp writes them; None for an
        encoder and for the two placeholder labels transformers adds to every config."""
        id2label = self.cfg.get("id2label") or {}
        if not self.classifier or not id2label or (len(id2label) == 2 and id2label.get("0") == "LABEL_0"):
            return None
        return [id2label[k] for k in sorted(id2label, key=int)]

    @staticmethod
    def _unprefixed(hf_name: str) -> str:
        return hf_name[5:] if hf_name.startswith("bert.") else hf_name

    def derived(self, hf_name: str) -> bool:
        name = self._unprefixed(hf_name)
        if self.classifier and name.startswith("pooler.dense."):
            return False
        return name in self._dropped or name.startswith(("cls.predictions", "cls.seq_relationship"))

    def gguf_name(self, hf_name: str) -> str | None:
        name = self._unprefixed(hf_name)
        if name in ("classifier.weight", "classifier.bias"):   # a direct projection
            return "cls.output." + name.split(".")[-1]
        if self.classifier and name.startswith("pooler.dense."):
            return "cls." + name.split(".")[-1]
        return self.names.get_name(name, try_suffixes=(".weight", ".bias"))


class XLMRoberta(Bert):
    """XLM-RoBERTa encoders (bge-m3, multilingual-e5: XLMRobertaModel; the bge-reranker-v2-m3 /
    bge-reranker-base cross-encoders: XLMRobertaForSequenceClassification) as llama.cpp's
    converter writes them (conversion/bert.py XLMRobertaModel): BERT's graph under the "roberta."
    prefix, a Unigram vocabulary (vocab.py), and positions that start at padding_idx + 1 (HF counts
    them from the pad id), so the first pad_token_id + 1 rows of the position embeddings are
    dropped and the context is that much shorter. The classification head (classifier.dense,
    classifier.out_proj) is cls / cls.output by the tensor table, what rank pooling computes."""
    _refused = {"lora_adaptations": "jina-embeddings-v3's task LoRAs (arch jina-bert-v3)"}

    def __init__(self, cfg: dict[str, Any]):
        for key, what in self._refused.items():
            if cfg.get(key):
                raise ModelFormatError(f"config.json has {key}: {what} cannot be converted yet")
        if cfg.get("position_embedding_type", "absolute") != "absolute":
            raise ModelFormatError(f"position_embedding_type {cfg['position_embedding_type']!r} cannot be "
                                   "converted (only absolute position embeddings)")
        super().__init__(cfg)
        pad = cfg.get("pad_token_id")
        self.position_offset = int(pad) + 1 if pad is not None else 0

    def context_length(self) -> int:
        return super().context_length() - self.position_offset   # without the dropped positions

    def vocabulary(self, folder: Path, n_vocab: int | None) -> Vocabulary:
        return load_unigram_vocabulary(folder, n_vocab)

    @staticmethod
    def _unprefixed(hf_name: str) -> str:
        return hf_name[8:] if hf_name.startswith("roberta.") else hf_name

    def transform(self, gguf_name: str, data: np.ndarray) -> np.ndarray:
        if gguf_name == "position_embd.weight":
            return data[self.position_offset:]
        return data

    def transformed_shape(self, gguf_name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        if gguf_name == "position_embd.weight":
            return (shape[0] - self.position_offset, *shape[1:])
        return shape


class NomicBert(Bert):
    """nomic-embed-text v1 / v1.5 (NomicBertModel, the checkpoint's own modelling code) as
    llama.cpp's converter writes them (conversion/bert.py NomicBertModel): architecture
    nomic-bert, BERT's post-LN encoder with rotary positions (rotary_emb_base -> rope.freq_base,
    no position table), a fused Wqkv (attn_qkv), a SwiGLU feed-forward (fc11 -> ffn_up, fc12 ->
    ffn_gate, fc2 -> ffn_down) and no projection biases. The context is max_trained_positions
    (2048: the n_positions of 8192 in their config was never trained). What the runtime does not
    compute (arch/nomic_bert.cpp) is refused by name rather than converted into a wrong model."""
    arch = MODEL_ARCH.NOMIC_BERT
    _required = {"prenorm": False, "qkv_proj_bias": False, "mlp_fc1_bias": False, "mlp_fc2_bias": False,
                 "rotary_emb_fraction": 1.0, "rotary_emb_interleaved": False, "rotary_emb_scale_base": None,
                 "activation_function": "swiglu", "causal": False}
    _meaning = {"prenorm": "pre-LN layers", "qkv_proj_bias": "a Wqkv bias", "mlp_fc1_bias": "fc11 / fc12 biases",
                "mlp_fc2_bias": "an fc2 bias", "rotary_emb_fraction": "RoPE on part of each head",
                "rotary_emb_interleaved": "interleaved (GPT-J) RoPE", "rotary_emb_scale_base": "xPos scaling",
                "activation_function": "a feed-forward other than SwiGLU", "causal": "causal attention"}

    def __init__(self, cfg: dict[str, Any]):
        if cfg.get("moe_every_n_layers"):
            raise ModelFormatError("config.json has moe_every_n_layers: nomic-bert-moe (nomic-embed-text-v2-moe) "
                                   "cannot be converted yet")
        for key, wanted in self._required.items():
            if key in cfg and cfg[key] != wanted:
                raise ModelFormatError(f"config.json has {key} = {cfg[key]!r}: {self._meaning[key]} cannot be "
                                       f"converted (nomic-bert is converted with {key} = {wanted!r})")
        super().__init__(cfg)
        if self.classifier:
            raise ModelFormatError("a nomic-bert classifier cannot be converted (only NomicBertModel)")
        self.rope["rope_theta"] = float(config_value(cfg, "rotary_emb_base"))

    def context_length(self) -> int:
        return int(self.cfg.get("max_trained_positions") or config_value(self.cfg, "n_positions"))

    def write_metadata(self, w: GGUFWriter) -> None:
        c = self.cfg
        w.add_context_length(self.context_length())
        w.add_embedding_length(self.n_embd)
        w.add_feed_forward_length(int(config_value(c, "n_inner")))
        w.add_block_count(self.n_layer)
        w.add_head_count(self.n_head)
        w.add_rope_freq_base(self.rope["rope_theta"])
        w.add_layer_norm_eps(float(c.get("layer_norm_epsilon", 1e-12)))
        w.add_causal_attention(False)
        w.add_token_type_count(int(c.get("type_vocab_size", 1)))
        w.add_vocab_size(int(config_value(c, "vocab_size")))

    def derived(self, hf_name: str) -> bool:
        return hf_name.endswith(".rotary_emb.inv_freq") or super().derived(hf_name)

