"""The decoder families other than Llama's own (base.py): what each writes beyond it and the
tensor transforms llama.cpp's converter applies to them (experts stacked, fused tensors split)."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Iterable

import numpy as np
from gguf import MODEL_ARCH, ExpertGatingFuncType, GGUFWriter, PoolingType

from edgeinfer.convert.base import Architecture, config_value
from edgeinfer.convert.rope import write_rope_scaling
from edgeinfer.convert.vocab import Vocabulary
from edgeinfer.errors import ModelFormatError


class Qwen2(Architecture):
    """Qwen 2 / 2.5: Llama plus Q/K/V biases, neox RoPE (no permutation)."""
    arch = MODEL_ARCH.QWEN2
    permute_qk = False
    rope_types = ("default", "linear", "yarn")


# llama.cpp's converter stores it as tokenizer.chat_template.rerank, and its server fills in
# {query} and {document}: Qwen3-Reranker's prompt as its model card builds it.
QWEN3_RERANK_TEMPLATE = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
    "Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
    "<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n"
    "<Query>: {query}\n<Document>: {document}<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n")


class Qwen3(Qwen2):
    """Qwen 3 (dense): per-head RMS norms on Q and K, no biases. Qwen3-Embedding is this with the
    sentence-transformers folder's last-token pooling (run.py).

    A Qwen3-Reranker (found as llama.cpp's converter finds it: "# Qwen3-Reranker" in README.md,
    "qwen3-reranker" in the folder's name, or a ...ForSequenceClassification architecture) is
    written as llama.cpp writes it: its lm_head rows of the tokens "yes" and "no", in that order,
    become the classification head cls.output (no output tensor), the pooling is rank, and the
    prompt is QWEN3_RERANK_TEMPLATE. Rank pooling then scores softmax([yes, no] logits)[0] =
    P(yes), what the model card computes."""
    arch = MODEL_ARCH.QWEN3
    answer_tokens = ("yes", "no")   # cls.output's rows, in order; written as the classifier's output labels

    def __init__(self, cfg: dict[str, Any]):
        super().__init__(cfg)
        self.pooling: PoolingType | None = None
        self.answer_ids: list[int] = []

    def read_folder(self, folder: Path, vocab: Vocabulary) -> None:
        readme = folder / "README.md"
        hints = [folder.name, str(self.cfg.get("_name_or_path", "")), str(self.cfg.get("model_type", "")),
                 *(str(a) for a in self.cfg.get("architectures") or [])]
        if not ((readme.is_file() and "# qwen3-reranker" in readme.read_text(encoding="utf-8").lower())
                or any("qwen3-reranker" in h.lower() or "sequenceclassification" in h.lower() for h in hints)):
            return
        for text in self.answer_tokens:
            if text not in vocab.tokens:
                raise ModelFormatError(f"{folder}: a Qwen3 reranker needs the token {text!r} in its vocabulary")
            self.answer_ids.append(vocab.tokens.index(text))
        self.pooling = PoolingType.RANK

    def write_metadata(self, w: GGUFWriter) -> None:
        super().write_metadata(w)
        if self.answer_ids:
            w.add_classifier_output_labels(list(self.answer_tokens))
            w.add_chat_template([{"name": "rerank", "template": QWEN3_RERANK_TEMPLATE}])

    def splits(self, hf_names: Iterable[str]):
        if not self.answer_ids:
            return {}
        names = list(hf_names)
        head = next((n for n in ("lm_head.weight",) if n in names), None)
        rows = (lambda x, ids=tuple(self.answer_ids): np.ascontiguousarray(x[list(ids)]))
        shape = (lambda s, k=len(self.answer_ids): (k, *s[1:]))
        if head is not None:   # the untied head is replaced by its two rows
            return {"cls.output.weight": (head, rows, shape)}
        embd = next(n for n in names if n.endswith("embed_tokens.weight"))   # tied: kept as well
        return {"cls.output.weight": (embd, rows, shape), "token_embd.weight": (embd, lambda x: x, lambda s: s)}


class Qwen3Moe(Qwen3):
    """Qwen 3 mixture of experts: Qwen 3's attention; in every layer a router (mlp.gate ->
    ffn_gate_inp) and num_experts experts, whose gate, up and down projections are stacked into one
    3-D tensor each (ffn_{gate,up,down}_exps, [n_expert][rows][cols], expert e = matrix e), with
    the expert count, experts per token and expert width as keys: what llama.cpp's converter
    writes. llama.cpp always renormalizes the chosen experts' weights and has no dense layers in
    this architecture, so checkpoints with norm_topk_prob false or with mlp_only_layers are
    refused rather than converted into files it would run differently."""
    arch = MODEL_ARCH.QWEN3MOE
    _expert = re.compile(r"^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight$")

    def __init__(self, cfg: dict[str, Any]):
        super().__init__(cfg)
        _refuse_biases(cfg, "Qwen 3 MoE")
        self.n_expert, self.n_expert_used = expert_counts(cfg)
        if not cfg.get("norm_topk_prob", False):
            raise ModelFormatError("Qwen 3 MoE with norm_topk_prob false is not supported: GGUF files "
                                   "(llama.cpp's qwen3moe) always renormalize the chosen experts' weights")
        if cfg.get("mlp_only_layers") or int(cfg.get("decoder_sparse_step") or 1) != 1:
            raise ModelFormatError("Qwen 3 MoE with dense layers (mlp_only_layers, decoder_sparse_step) is not "
                                   "supported: GGUF files (llama.cpp's qwen3moe) have experts in every layer")

    def write_metadata(self, w: GGUFWriter) -> None:
        super().write_metadata(w)
        w.add_expert_count(self.n_expert)
        w.add_expert_used_count(self.n_expert_used)
        w.add_expert_feed_forward_length(int(config_value(self.cfg, "moe_intermediate_size")))

    def stacks(self, hf_names: Iterable[str]) -> dict[str, list[str]]:
        return stack_experts(hf_names, self._expert, self.n_expert, {p: p for p in ("gate", "up", "down")})


def expert_counts(cfg: dict[str, Any]) -> tuple[int, int]:
    """(experts a layer has, experts a token uses) of a mixture-of-experts config.json."""
    n_expert = int(config_value(cfg, "num_experts", "num_local_experts"))
    n_used = int(config_value(cfg, "num_experts_per_tok"))
    if not 0 < n_used <= n_expert:
        raise ModelFormatError(f"config.json: num_experts_per_tok {n_used} must be in 1..{n_expert}")
    return n_expert, n_used


def stack_experts(hf_names: Iterable[str], pattern: re.Pattern[str], n_expert: int,
                  projections: dict[str, str]) -> dict[str, list[str]]:
    """Per-expert checkpoint matrices stacked as llama.cpp's converter stacks them:
    blk.L.ffn_{gate,up,down}_exps.weight -> the experts' tensors in order. `pattern` matches an
    expert's tensor as (layer, expert, projection); `projections` names each projection's stack
    (gate, up or down)."""
    found: dict[tuple[int, str], dict[int, str]] = {}
    for name in hf_names:
        m = pattern.match(name)
        if m:
            found.setdefault((int(m.group(1)), m.group(3)), {})[int(m.group(2))] = name
    out = {}
    for (layer, proj), experts in sorted(found.items()):
        if sorted(experts) != list(range(n_expert)):
            raise ModelFormatError(f"layer {layer}: {proj} of experts {sorted(experts)}, expected 0..{n_expert - 1}")
        out[f"blk.{layer}.ffn_{projections[proj]}_exps.weight"] = [experts[e] for e in range(n_expert)]
    return out


class Phi3(Architecture):
    """Phi-3 / Phi-3.5 mini: fused QKV and gate/up projections (kept fused, as llama.cpp stores
    them), neox RoPE over `partial_rotary_factor` of each head; LongRoPE's long and short
    per-frequency factors become tensors and its attention factor a key, as llama.cpp's converter
    writes them."""
    arch = MODEL_ARCH.PHI3
    permute_qk = False
    rope_types = ("default", "longrope", "su")

    def _orig_ctx(self) -> int:
        return int(self.cfg.get("original_max_position_embeddings") or self.cfg.get("max_position_embeddings"))

    def longrope_attn_factor(self) -> float:
        """transformers' default: sqrt(1 + ln(s) / ln(original context)), s = context growth."""
        if self.rope.get("attention_factor") is not None:
            return float(self.rope["attention_factor"])
        scale = int(config_value(self.cfg, "max_position_embeddings")) / self._orig_ctx()
        return 1.0 if scale <= 1.0 else math.sqrt(1 + math.log(scale) / math.log(self._orig_ctx()))

    def extra_tensors(self) -> dict[str, np.ndarray]:
        if self.rope["rope_type"] not in ("longrope", "su"):
            return {}
        partial = float(self.rope.get("partial_rotary_factor", self.cfg.get("partial_rotary_factor", 1.0)))
        n = int(partial * self.head_dim) // 2
        tensors = {}
        for kind in ("long", "short"):
            factors = np.asarray(self.rope.get(f"{kind}_factor") or [], dtype=np.float32)
            if factors.shape != (n,):
                raise ModelFormatError(f"config.json: rope {kind}_factor has {factors.size} values, expected {n}")
            tensors[f"rope_factors_{kind}.weight"] = factors
        return tensors

    def write_metadata(self, w: GGUFWriter) -> None:
        c = self.cfg
        w.add_context_length(int(config_value(c, "max_position_embeddings", "n_positions")))
        w.add_rope_scaling_orig_ctx_len(int(c.get("original_max_position_embeddings")
                                            or c.get("max_position_embeddings")))
        w.add_embedding_length(self.n_embd)
        w.add_feed_forward_length(int(config_value(c, "intermediate_size")))
        w.add_block_count(self.n_layer)
        w.add_head_count(self.n_head)
        w.add_head_count_kv(self.n_head_kv)
        w.add_layer_norm_rms_eps(float(c.get("rms_norm_eps", 1e-5)))
        partial = float(self.rope.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0)))
        w.add_rope_dimension_count(int(partial * self.n_embd) // self.n_head)
        w.add_rope_freq_base(float(self.rope.get("rope_theta", 10000.0)))
        w.add_sliding_window(int(c.get("sliding_window") or 0))
        if self.rope["rope_type"] in ("longrope", "su"):
            w.add_rope_scaling_attn_factors(self.longrope_attn_factor())


class Gemma3(Architecture):
    """Gemma 3 text models: norm weights stored as (1 + w), as llama.cpp's converter folds them;
    the sliding-window (local) layers' own RoPE base; tied output. Gemma's tokenizer never adds a
    prefix space, whatever tokenizer_config.json says or omits (llama.cpp's converter writes
    false too); readers default a missing flag to true for SentencePiece vocabularies."""
    arch = MODEL_ARCH.GEMMA3
    permute_qk = False
    rope_types = ("default", "linear")
    add_space_prefix = False

    def local_rope_base(self) -> float:
        """The local layers' RoPE base: transformers 5's rope_parameters["sliding_attention"],
        older configs' rope_local_base_freq, else Gemma 3's 10000. Those layers are never
        scaled: a scaling there is refused rather than dropped."""
        sliding = (self.cfg.get("rope_parameters") or {}).get("sliding_attention") or {}
        if (sliding.get("rope_type") or "default") != "default":
            raise ModelFormatError(f"rope scaling '{sliding['rope_type']}' on Gemma 3's sliding-window "
                                   "layers is not supported")
        return float(sliding.get("rope_theta") or self.cfg.get("rope_local_base_freq") or 10000.0)

    def write_metadata(self, w: GGUFWriter) -> None:
        c = self.cfg
        if c.get("attn_logit_softcapping") is not None:
            raise ModelFormatError("Gemma 3 with attention logit soft-capping is not supported")
        w.add_context_length(int(c.get("max_position_embeddings", 131072)))
        w.add_embedding_length(self.n_embd)
        w.add_block_count(self.n_layer)
        w.add_feed_forward_length(int(config_value(c, "intermediate_size")))
        w.add_head_count(self.n_head)
        w.add_layer_norm_rms_eps(float(c.get("rms_norm_eps", 1e-6)))
        w.add_key_length(self.head_dim)
        w.add_value_length(self.head_dim)
        w.add_rope_freq_base(float(self.rope.get("rope_theta", 1_000_000.0)))
        w.add_rope_freq_base_swa(self.local_rope_base())
        w.add_sliding_window(int(config_value(c, "sliding_window")))
        w.add_head_count_kv(self.n_head_kv)
        if c.get("final_logit_softcapping") is not None:
            w.add_final_logit_softcapping(float(c["final_logit_softcapping"]))
        write_rope_scaling(w, self.rope)

    def gguf_name(self, hf_name: str) -> str | None:
        return super().gguf_name(hf_name.removeprefix("language_model."))

    def transform(self, gguf_name: str, data: np.ndarray) -> np.ndarray:
        if gguf_name.endswith("norm.weight"):
            return data + np.float32(1.0)
        if gguf_name == "token_embd.weight":   # the embedding may be padded past the vocabulary
            return data[:self.transformed_shape(gguf_name, data.shape)[0]]
        return data

    def transformed_shape(self, gguf_name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        if gguf_name == "token_embd.weight":
            return (min(shape[0], int(self.cfg.get("vocab_size", shape[0]))), *shape[1:])
        return shape


class EmbeddingGemma(Gemma3):
    """EmbeddingGemma (sentence-transformers' Gemma3TextModel; llama.cpp's gemma-embedding): Gemma
    3's layers attending bidirectionally, mean pooling (run.py reads it from modules.json), then
    the folder's Dense modules as dense_2 and dense_3 with their <arch>.dense_N_feat_in/out keys,
    as llama.cpp's converter writes them with --sentence-transformers-dense-modules (here always:
    the model's embeddings are defined with them). sliding_window is config.json's own value,
    which transformers' config halves for bidirectional attention on load."""
    arch = MODEL_ARCH.GEMMA_EMBEDDING

    def __init__(self, cfg: dict[str, Any]):
        super().__init__(cfg)
        self.dense: dict[str, tuple[int, int, np.ndarray]] = {}   # "dense_2" -> (in, out, weight)

    def read_folder(self, folder: Path, vocab: Vocabulary) -> None:
        from edgeinfer.convert.checkpoint import read_safetensors

        modules = folder / "modules.json"
        if not modules.is_file():
            return
        for module in json.loads(modules.read_text(encoding="utf-8")):
            if not str(module.get("type", "")).endswith("Dense"):
                continue
            path = folder / module["path"]
            if not (path / "model.safetensors").is_file():
                continue
            cfg = json.loads((path / "config.json").read_text(encoding="utf-8"))
            if cfg.get("bias") or not str(cfg.get("activation_function", "Identity")).endswith("Identity"):
                raise ModelFormatError(f"{path}: a Dense module with a bias or an activation is not supported "
                                       "(GGUF stores only the weight)")
            # llama.cpp's names: the module in 2_Dense is dense_2, any other dense_3
            name = "dense_2" if module["path"] == "2_Dense" else "dense_3"
            weight = read_safetensors(path / "model.safetensors")["linear.weight"]
            self.dense[name] = (int(cfg["in_features"]), int(cfg["out_features"]), weight)

    def write_metadata(self, w: GGUFWriter) -> None:
        super().write_metadata(w)
        for name, (n_in, n_out, _) in self.dense.items():
            w.add_dense_features_dims(name, n_in, n_out)

    def extra_tensors(self) -> dict[str, np.ndarray]:
        return {**super().extra_tensors(), **{f"{name}.weight": wt for name, (_, _, wt) in self.dense.items()}}


def _refuse_biases(cfg: dict[str, Any], name: str) -> None:
    """The llama-style families run no projection biases: a checkpoint with them is refused rather
    than converted into a file whose biases would go unused."""
    for key in ("attention_bias", "mlp_bias"):
        if cfg.get(key):
            raise ModelFormatError(f"{name} with {key} is not supported")


class SmolLM3(Architecture):
    """SmolLM3: Llama (Q/K permuted for llama.cpp's adjacent-pair RoPE) with RoPE skipped on every
    fourth layer. llama.cpp fixes that interval at 4 in its loader and no GGUF key carries it,
    so a config whose no_rope_layers follow another pattern is refused, as is a sliding window;
    its graph passes no rope factors, so llama3 scaling (a rope_freqs tensor) is refused too."""
    arch = MODEL_ARCH.SMOLLM3
    rope_types = ("default", "linear", "yarn")
    no_rope_interval = 4   # llama.cpp's n_no_rope_layer_step

    def __init__(self, cfg: dict[str, Any]):
        super().__init__(cfg)
        _refuse_biases(cfg, "SmolLM3")
        interval = int(cfg.get("no_rope_layer_interval") or self.no_rope_interval)
        flags = cfg.get("no_rope_layers")   # 1: the layer is roped (transformers' meaning)
        if flags is None:
            flags = [int((i + 1) % interval != 0) for i in range(self.n_layer)]
        expected = [int((i + 1) % self.no_rope_interval != 0) for i in range(self.n_layer)]
        if [int(bool(f)) for f in flags] != expected:
            raise ModelFormatError(f"SmolLM3 with no_rope_layers {list(flags)} is not supported: GGUF files "
                                   f"(llama.cpp's loader) skip RoPE on every {self.no_rope_interval}th layer only")
        if cfg.get("use_sliding_window") and cfg.get("sliding_window"):
            raise ModelFormatError("SmolLM3 with a sliding window is not supported")


class Granite(Architecture):
    """IBM Granite 3.x (dense): Llama (Q/K permuted) with four multipliers written as llama.cpp's
    converter names them: embedding_multiplier -> embedding_scale, attention_multiplier ->
    attention.scale (replacing 1/sqrt(head_dim)), residual_multiplier -> residual_scale,
    logits_scaling -> logit_scale (logits divided by it). Each is written even where config.json
    omits it, at transformers' default of 1, which llama.cpp's converter would leave out (and its
    loader then read as 'not set': attention at 1/sqrt(head_dim), not 1)."""
    arch = MODEL_ARCH.GRANITE

    def __init__(self, cfg: dict[str, Any]):
        super().__init__(cfg)
        _refuse_biases(cfg, "Granite")

    def multiplier(self, key: str) -> float:
        value = float(self.cfg.get(key, 1.0))
        if not (math.isfinite(value) and value > 0.0):
            raise ModelFormatError(f"config.json: {key} {value} must be positive")
        return value

    def write_metadata(self, w: GGUFWriter) -> None:
        super().write_metadata(w)
        w.add_embedding_scale(self.multiplier("embedding_multiplier"))
        w.add_attention_scale(self.multiplier("attention_multiplier"))
        w.add_residual_scale(self.multiplier("residual_multiplier"))
        w.add_logit_scale(self.multiplier("logits_scaling"))


class Lfm2(Architecture):
    """Liquid AI LFM2: attention layers (Qwen 3's per-head Q/K norms, neox RoPE) among gated
    short-convolution layers, as llama.cpp's converter writes them: head_count_kv per layer, 0
    for a convolution layer (from layer_types, or the older full_attn_idxs), shortconv.l_cache,
    the convolution kernels squeezed to [n_embd][l_cache], the final norm as token_embd_norm
    (gguf-py's name for model.embedding_norm), the output tied to the embeddings. The
    feed-forward width is the one the checkpoint's weights have (transformers' auto-adjusted
    block_ff_dim). Biases on the convolution (conv_bias) are refused: llama.cpp's graph has none."""
    arch = MODEL_ARCH.LFM2
    permute_qk = False
    rope_types = ("default",)

    def __init__(self, cfg: dict[str, Any]):
        super().__init__(cfg)
        if cfg.get("conv_bias"):
            raise ModelFormatError("LFM2 with conv_bias is not supported: llama.cpp's lfm2 has no convolution biases")
        types = cfg.get("layer_types")
        if types is None:
            attn = set(cfg.get("full_attn_idxs") or range(self.n_layer))
            types = ["full_attention" if i in attn else "conv" for i in range(self.n_layer)]
        if len(types) != self.n_layer:
            raise ModelFormatError(f"config.json: layer_types has {len(types)} entries for {self.n_layer} layers")
        self.attention_layers = [t != "conv" for t in types]
        if not any(self.attention_layers):
            raise ModelFormatError("LFM2 without attention layers is not supported")

    def feed_forward_length(self) -> int:
        """transformers' Lfm2MLP width: 2/3 of block_ff_dim, times the multiplier and rounded up
        to block_multiple_of when a multiplier is set."""
        c = self.cfg
        ff = int(config_value(c, "block_ff_dim", "intermediate_size"))
        if c.get("block_auto_adjust_ff_dim", True):
            ff = int(2 * ff / 3)
            if c.get("block_ffn_dim_multiplier") is not None:
                ff = int(c["block_ffn_dim_multiplier"] * ff)
                multiple = int(c.get("block_multiple_of", 256))
                ff = multiple * ((ff + multiple - 1) // multiple)
        return ff

    def write_metadata(self, w: GGUFWriter) -> None:
        c = self.cfg
        w.add_block_count(self.n_layer)
        w.add_context_length(int(config_value(c, "max_position_embeddings")))
        w.add_embedding_length(self.n_embd)
        w.add_feed_forward_length(self.feed_forward_length())
        w.add_head_count(self.n_head)
        w.add_head_count_kv([self.n_head_kv if a else 0 for a in self.attention_layers])
        w.add_rope_freq_base(float(self.rope.get("rope_theta", 1_000_000.0)))
        w.add_vocab_size(int(config_value(c, "vocab_size")))
        w.add_shortconv_l_cache(int(c.get("conv_L_cache", 3)))
        w.add_layer_norm_rms_eps(float(c.get("norm_eps", 1e-5)))

    def transform(self, gguf_name: str, data: np.ndarray) -> np.ndarray:
        if gguf_name.endswith("shortconv.conv.weight"):   # [n_embd][1][l_cache] -> [n_embd][l_cache]
            return data.reshape(data.shape[0], data.shape[-1])
        return data

    def transformed_shape(self, gguf_name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        if gguf_name.endswith("shortconv.conv.weight"):
            return (shape[0], shape[-1])
        return shape

class Lfm2Moe(Lfm2):
    """Liquid AI LFM2-MoE (LFM2-8B-A1B): LFM2's layers, with a mixture of experts as the
    feed-forward of every layer from num_dense_layers on: a sigmoid router (feed_forward.gate ->
    ffn_gate_inp), a per-expert selection bias (feed_forward.expert_bias -> exp_probs_b.bias) and
    the experts' w1 / w3 / w2 stacked into ffn_{gate,up,down}_exps, with the keys llama.cpp's
    converter writes (expert counts and width, leading_dense_block_count, gating function
    sigmoid). The dense layers' width is intermediate_size as it stands. llama.cpp always
    renormalizes the chosen experts' weights and never scales them, so a checkpoint that does
    otherwise (norm_topk_prob false, routed_scaling_factor != 1) or has no selection bias is
    refused rather than converted into a file it would run differently."""
    arch = MODEL_ARCH.LFM2MOE
    _expert = re.compile(r"^model\.layers\.(\d+)\.feed_forward\.experts\.(\d+)\.(w1|w2|w3)\.weight$")

    def __init__(self, cfg: dict[str, Any]):
        super().__init__(cfg)
        self.n_expert, self.n_expert_used = expert_counts(cfg)
        if not cfg.get("norm_topk_prob", True):
            raise ModelFormatError("LFM2-MoE with norm_topk_prob false is not supported: llama.cpp's lfm2moe always "
                                   "renormalizes the chosen experts' weights")
        if float(cfg.get("routed_scaling_factor", 1.0)) != 1.0:
            raise ModelFormatError("LFM2-MoE with routed_scaling_factor != 1 is not supported: llama.cpp's lfm2moe "
                                   "does not scale the experts' weights")
        if not cfg.get("use_expert_bias", True):
            raise ModelFormatError("LFM2-MoE without expert_bias is not supported: llama.cpp's lfm2moe requires "
                                   "the selection bias")

    def feed_forward_length(self) -> int:
        return int(config_value(self.cfg, "intermediate_size"))

    def write_metadata(self, w: GGUFWriter) -> None:
        super().write_metadata(w)
        w.add_expert_count(self.n_expert)
        w.add_expert_used_count(self.n_expert_used)
        w.add_expert_feed_forward_length(int(config_value(self.cfg, "moe_intermediate_size")))
        w.add_leading_dense_block_count(int(self.cfg.get("num_dense_layers", 0)))
        w.add_expert_gating_func(ExpertGatingFuncType.SIGMOID)

    def gguf_name(self, hf_name: str) -> str | None:
        if hf_name.endswith(".feed_forward.expert_bias"):   # a bias with no suffix of its own
            name = super().gguf_name(hf_name)
            return None if name is None else name + ".bias"
        return super().gguf_name(hf_name)

    def stacks(self, hf_names: Iterable[str]) -> dict[str, list[str]]:
        return stack_experts(hf_names, self._expert, self.n_expert, {"w1": "gate", "w3": "up", "w2": "down"})


class GptOss(Architecture):
    """OpenAI gpt-oss: Q/K/V/O with biases, per-head attention sinks (self_attn.sinks ->
    attn_sinks.weight), neox RoPE with YaRN, every other layer sliding-window; in every layer a
    router with a bias and experts stored as 3-D parameters, written as llama.cpp's converter writes
    them: mlp.experts.gate_up_proj [E][n_embd][2 ff] (gate and up interleaved, column 2i gate,
    2i + 1 up) becomes ffn_gate_exps and ffn_up_exps [E][ff][n_embd], its bias ffn_{gate,up}_exps.bias
    [E][ff]; down_proj [E][ff][n_embd] becomes ffn_down_exps [E][n_embd][ff]. The released
    checkpoints keep the experts in MXFP4 (``*_blocks`` / ``*_scales``): that form is refused
    (llama.cpp's converter repacks it; here only dense checkpoints convert). The released config
    has YaRN with truncate: false, which every gpt-oss GGUF is run without (ggml truncates the
    correction range): written as llama.cpp's converter writes it."""
    arch = MODEL_ARCH.GPT_OSS
    permute_qk = False
    rope_types = ("default", "yarn")
    yarn_untruncated_ok = True
    _layer = r"^model\.layers\.(\d+)\.mlp\.experts\."

    def __init__(self, cfg: dict[str, Any]):
        super().__init__(cfg)
        self.n_expert = int(config_value(cfg, "num_local_experts", "num_experts"))
        self.n_expert_used = int(config_value(cfg, "num_experts_per_tok", "experts_per_token"))
        if not 0 < self.n_expert_used <= self.n_expert:
            raise ModelFormatError(f"config.json: num_experts_per_tok {self.n_expert_used} must be in "
                                   f"1..{self.n_expert}")
        for key, value in (("swiglu_alpha", 1.702), ("swiglu_limit", 7.0)):
            if float(cfg.get(key, value)) != value:   # llama.cpp's graph fixes both
                raise ModelFormatError(f"gpt-oss with {key} {cfg[key]} is not supported (llama.cpp runs {value})")
        types = cfg.get("layer_types")
        expected = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(self.n_layer)]
        if types is not None and list(types) != expected:
            raise ModelFormatError("gpt-oss whose layer_types do not alternate sliding, full from layer 0 is "
                                   "not supported (llama.cpp's swa pattern)")

    def write_metadata(self, w: GGUFWriter) -> None:
        super().write_metadata(w)
        w.add_expert_count(self.n_expert)
        w.add_expert_used_count(self.n_expert_used)
        w.add_sliding_window(int(config_value(self.cfg, "sliding_window")))
        w.add_expert_feed_forward_length(int(config_value(self.cfg, "intermediate_size")))

    def gguf_name(self, hf_name: str) -> str | None:
        if hf_name.endswith(("_blocks", "_scales")):
            raise ModelFormatError(f"{hf_name}: MXFP4-packed experts are not supported by convert; convert a "
                                   "dequantized (bf16) checkpoint, or use llama.cpp's convert_hf_to_gguf.py")
        if hf_name.endswith(".self_attn.sinks"):
            hf_name += ".weight"
        if hf_name.endswith(".mlp.experts.down_proj"):
            hf_name += ".weight"
        if hf_name.endswith(".mlp.experts.down_proj_bias"):
            hf_name = hf_name.removesuffix("_bias") + ".bias"
        return super().gguf_name(hf_name)

    def transform(self, gguf_name: str, data: np.ndarray) -> np.ndarray:
        if gguf_name.endswith("ffn_down_exps.weight"):
            return np.ascontiguousarray(data.swapaxes(-1, -2))
        return data

    def transformed_shape(self, gguf_name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        if gguf_name.endswith("ffn_down_exps.weight"):
            return (*shape[:-2], shape[-1], shape[-2])
        return shape

    def splits(self, hf_names: Iterable[str]):
        out = {}
        for name in hf_names:
            m = re.match(self._layer + r"gate_up_proj(_bias)?$", name)
            if not m:
                continue
            layer, bias = int(m.group(1)), m.group(2) is not None
            for offset, part in ((0, "gate"), (1, "up")):
                if bias:   # [E][2 ff] -> [E][ff]
                    take = (lambda x, o=offset: np.ascontiguousarray(x[..., o::2]))
                    shape = (lambda s: (*s[:-1], s[-1] // 2))
                else:      # [E][n_embd][2 ff] -> [E][ff][n_embd]
                    take = (lambda x, o=offset: np.ascontiguousarray(x.swapaxes(-1, -2)[:, o::2, :]))
                    shape = (lambda s: (s[0], s[2] // 2, s[1]))
                out[f"blk.{layer}.ffn_{part}_exps.{'bias' if bias else 'weight'}"] = (name, take, shape)
        return out
