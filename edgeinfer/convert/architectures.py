"""What differs between architectures when converting: the GGUF architecture name, the
hyper-parameter keys written, and the few tensor transforms llama.cpp's converter applies.
Tensor names come from gguf-py's TensorNameMap (llama.cpp's one table of HF -> GGUF names).

One class per family, found by the ``architectures`` entry of config.json (ARCHITECTURES below).
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
from gguf import (MODEL_ARCH, MODEL_ARCH_NAMES, ExpertGatingFuncType, GGUFWriter, PoolingType, RopeScalingType, TensorNameMap,
                  get_tensor_name_map)

from edgeinfer.convert.vocab import Vocabulary, load_unigram_vocabulary, load_vocabulary
from edgeinfer.errors import ModelFormatError


def _require(cfg: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    raise ModelFormatError(f"config.json has no {' / '.join(keys)}")


def rope_parameters(cfg: dict[str, Any], layer_type: str = "full_attention") -> dict[str, Any]:
    """RoPE settings as one dict (rope_theta, rope_type, factor, ...) from either spelling:
    transformers 5's ``rope_parameters`` (per layer type for Gemma 3) or the older top-level
    ``rope_theta`` + ``rope_scaling``."""
    params = dict(cfg.get("rope_parameters") or {})
    if layer_type in params and isinstance(params[layer_type], dict):
        params = dict(params[layer_type])
    params.update(cfg.get("rope_scaling") or {})
    if "rope_theta" not in params and cfg.get("rope_theta") is not None:
        params["rope_theta"] = cfg["rope_theta"]
    if "original_max_position_embeddings" not in params and cfg.get("original_max_position_embeddings") is not None:
        params["original_max_position_embeddings"] = cfg["original_max_position_embeddings"]   # as llama.cpp's
    params["rope_type"] = params.get("rope_type", params.get("type", "default")) or "default"
    return params


def yarn_metadata(rope: dict[str, Any], allow_untruncated: bool = False) -> dict[str, float | int]:
    """YaRN's keys as llama.cpp's converter writes them (factor, original context, and the
    optional extrapolation_factor, attention_factor, beta_fast, beta_slow where config.json has
    them), for the settings the core computes as transformers does; anything else is refused.
    `allow_untruncated`: a family whose GGUF files are all run with ggml's truncated correction
    range whatever config.json says (gpt-oss: its released config has truncate: false)."""
    if rope.get("factor") is None:
        # transformers would derive max_position_embeddings / original; llama.cpp's converter
        # writes no scaling at all.
        raise ModelFormatError("rope scaling 'yarn' without a factor is not supported")
    if rope.get("original_max_position_embeddings") is None:
        raise ModelFormatError("rope scaling 'yarn' needs original_max_position_embeddings")
    if rope.get("truncate") is False and not allow_untruncated:
        raise ModelFormatError("rope scaling 'yarn' with truncate: false is not supported (ggml always "
                               "rounds the correction range to whole dims)")
    attention_factor = rope.get("attention_factor", rope.get("attn_factor"))
    if attention_factor is None and rope.get("mscale") and rope.get("mscale_all_dim"):
        raise ModelFormatError("rope scaling 'yarn' with mscale and mscale_all_dim is not supported")
    out: dict[str, float | int] = {"factor": float(rope["factor"]),
                                   "orig_ctx_len": int(rope["original_max_position_embeddings"])}
    if not (math.isfinite(out["factor"]) and out["factor"] > 0):
        raise ModelFormatError(f"rope scaling 'yarn': factor {out['factor']} must be positive")
    for config_key, key in (("extrapolation_factor", "ext_factor"), ("beta_fast", "beta_fast"),
                            ("beta_slow", "beta_slow")):
        if rope.get(config_key) is not None:
            out[key] = float(rope[config_key])
    if attention_factor is not None:
        out["attn_factor"] = float(attention_factor)
    return out


def write_rope_scaling(w: GGUFWriter, rope: dict[str, Any], allow_untruncated: bool = False) -> None:
    """The rope.scaling.* keys of the linear and YaRN scalings (no keys for none; llama3 and
    LongRoPE are tensors their families write)."""
    if rope["rope_type"] == "linear":
        w.add_rope_scaling_type(RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(float(rope["factor"]))
    elif rope["rope_type"] == "yarn":
        yarn = yarn_metadata(rope, allow_untruncated)
        w.add_rope_scaling_type(RopeScalingType.YARN)
        w.add_rope_scaling_factor(yarn["factor"])
        w.add_rope_scaling_orig_ctx_len(int(yarn["orig_ctx_len"]))
        if "ext_factor" in yarn:
            w.add_rope_scaling_yarn_ext_factor(yarn["ext_factor"])
        if "attn_factor" in yarn:
            w.add_rope_scaling_yarn_attn_factor(yarn["attn_factor"])
        if "beta_fast" in yarn:
            w.add_rope_scaling_yarn_beta_fast(yarn["beta_fast"])
        if "beta_slow" in yarn:
            w.add_rope_scaling_yarn_beta_slow(yarn["beta_slow"])


class Architecture:
    """The llama family's conversion; the other families adjust it."""
    arch = MODEL_ARCH.LLAMA
    permute_qk = True          # HF rotates halves (neox); llama.cpp runs llama with adjacent pairs
    # "dynamic" (NTK) is refused: llama.cpp's converter writes no scaling for it (a plain-RoPE file
    # that transformers' model would leave once a sequence passes max_position_embeddings), and
    # ggml has no dynamic scaling.
    rope_types = ("default", "linear", "yarn", "llama3")
    add_space_prefix: bool | None = None   # the family's fixed tokenizer.ggml.add_space_prefix
                                           # (None: what tokenizer_config.json says, if anything)
    n_expert = 0                           # experts a layer (mixture-of-experts families)
    yarn_untruncated_ok = False            # see yarn_metadata's allow_untruncated

    def __init__(self, cfg: dict[str, Any]):
        self.cfg = cfg
        self.n_layer = int(_require(cfg, "num_hidden_layers", "n_layer"))
        self.n_embd = int(_require(cfg, "hidden_size", "n_embd"))
        self.n_head = int(_require(cfg, "num_attention_heads", "n_head"))
        self.n_head_kv = int(cfg.get("num_key_value_heads") or self.n_head)
        self.head_dim = int(cfg.get("head_dim") or self.n_embd // self.n_head)
        self.rope = rope_parameters(cfg)
        if self.rope["rope_type"] not in self.rope_types:
            raise ModelFormatError(f"rope scaling '{self.rope['rope_type']}' is not supported for "
                                   f"{self.name} yet (supported: {', '.join(self.rope_types)})")
        if self.rope["rope_type"] == "yarn":
            yarn_metadata(self.rope, self.yarn_untruncated_ok)   # refuse what cannot be written before any tensor is
        self.names: TensorNameMap = get_tensor_name_map(self.arch, self.n_layer)

    @property
    def name(self) -> str:
        return MODEL_ARCH_NAMES[self.arch]

    # --- metadata --------------------------------------------------------------------------------
    def vocabulary(self, folder: Path, n_vocab: int | None) -> Vocabulary:
        """The checkpoint's tokenizer as this family's GGUF holds it."""
        return load_vocabulary(folder, n_vocab, self.add_space_prefix)

    def write_metadata(self, w: GGUFWriter) -> None:
        c = self.cfg
        w.add_context_length(int(_require(c, "max_position_embeddings", "n_ctx", "n_positions")))
        w.add_embedding_length(self.n_embd)
        w.add_feed_forward_length(int(_require(c, "intermediate_size", "n_inner")))
        w.add_block_count(self.n_layer)
        w.add_head_count(self.n_head)
        w.add_head_count_kv(self.n_head_kv)
        if "rope_theta" in self.rope:
            w.add_rope_freq_base(float(self.rope["rope_theta"]))
        w.add_layer_norm_rms_eps(float(c.get("rms_norm_eps", 1e-5)))
        if c.get("head_dim") is not None:
            w.add_key_length(self.head_dim)
            w.add_value_length(self.head_dim)
        w.add_rope_dimension_count(self.head_dim)
        w.add_vocab_size(int(_require(c, "vocab_size")))
        write_rope_scaling(w, self.rope, self.yarn_untruncated_ok)

    def read_folder(self, folder: Path, vocab: Vocabulary) -> None:
        """What the family reads beyond config.json, before any tensor is named: the folder's
        other files and the vocabulary (a reranker's answer tokens, sentence-transformers'
        Dense modules)."""

    # --- tensors ---------------------------------------------------------------------------------
    def derived(self, hf_name: str) -> bool:
        """Checkpoint tensors the runtime computes itself (RoPE frequency caches)."""
        return hf_name.endswith(".rotary_emb.inv_freq")

    def gguf_name(self, hf_name: str) -> str | None:
        """GGUF name of a checkpoint tensor; None if the table does not know it."""
        return self.names.get_name(hf_name, try_suffixes=(".weight", ".bias"))

    def transform(self, gguf_name: str, data: np.ndarray) -> np.ndarray:
        """data: [rows][cols] float32 in HF layout -> what the GGUF tensor holds."""
        if self.permute_qk and gguf_name.endswith(("attn_q.weight", "attn_q.bias")):
            return permute_rope_rows(data, self.n_head)
        if self.permute_qk and gguf_name.endswith(("attn_k.weight", "attn_k.bias")):
            return permute_rope_rows(data, self.n_head_kv)
        return data

    def transformed_shape(self, gguf_name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape `transform` gives a tensor of `shape` (numpy order)."""
        return shape

    def stacks(self, hf_names: Iterable[str]) -> dict[str, list[str]]:
        """GGUF tensors made by stacking checkpoint tensors along a new first axis (the experts
        of a mixture-of-experts layer): GGUF name -> the checkpoint tensors, in order."""
        return {}

    def splits(self, hf_names: Iterable[str]) -> dict[str, tuple[str, Callable[[np.ndarray], np.ndarray],
                                                             Callable[[tuple[int, ...]], tuple[int, ...]]]]:
        """GGUF tensors cut out of one checkpoint tensor (gpt-oss's interleaved gate_up_proj): GGUF
        name -> (the checkpoint tensor, its part as the GGUF tensor holds it, the part's shape
        from the checkpoint tensor's)."""
        return {}

    def extra_tensors(self) -> dict[str, np.ndarray]:
        """Tensors computed from the config (Llama 3.1's rope_freqs)."""
        if self.rope["rope_type"] == "llama3":
            return {"rope_freqs.weight": llama3_rope_factors(self.rope, self.head_dim)}
        return {}


def permute_rope_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Rows of each head reordered from halves [x0..x(d/2-1), y0..] to pairs [x0, y0, x1, y1, ...],
    so that llama.cpp's adjacent-pair RoPE computes HF's rotate-half RoPE (llama.cpp's permute)."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(rope: dict[str, Any], head_dim: int) -> np.ndarray:
    """Llama 3.1's per-frequency divisors [head_dim / 2]: 1 for short wavelengths, `factor` for
    long ones, a smooth blend between (transformers' _compute_llama3_parameters)."""
    base = float(rope.get("rope_theta", 10000.0))
    factor = float(rope.get("factor", 8.0))
    low, high = float(rope.get("low_freq_factor", 1.0)), float(rope.get("high_freq_factor", 4.0))
    old_ctx = float(rope.get("original_max_position_embeddings", 8192))
    low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
    factors = []
    for i in range(0, head_dim, 2):
        freq = 1.0 / base ** (i / head_dim)
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            factors.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


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
        w.add_expert_feed_forward_length(int(_require(self.cfg, "moe_intermediate_size")))

    def stacks(self, hf_names: Iterable[str]) -> dict[str, list[str]]:
        return stack_experts(hf_names, self._expert, self.n_expert, {p: p for p in ("gate", "up", "down")})


def expert_counts(cfg: dict[str, Any]) -> tuple[int, int]:
    """(experts a layer has, experts a token uses) of a mixture-of-experts config.json."""
    n_expert = int(_require(cfg, "num_experts", "num_local_experts"))
    n_used = int(_require(cfg, "num_experts_per_tok"))
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
        scale = int(_require(self.cfg, "max_position_embeddings")) / self._orig_ctx()
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
        w.add_context_length(int(_require(c, "max_position_embeddings", "n_positions")))
        w.add_rope_scaling_orig_ctx_len(int(c.get("original_max_position_embeddings")
                                            or c.get("max_position_embeddings")))
        w.add_embedding_length(self.n_embd)
        w.add_feed_forward_length(int(_require(c, "intermediate_size")))
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
        w.add_feed_forward_length(int(_require(c, "intermediate_size")))
        w.add_head_count(self.n_head)
        w.add_layer_norm_rms_eps(float(c.get("rms_norm_eps", 1e-6)))
        w.add_key_length(self.head_dim)
        w.add_value_length(self.head_dim)
        w.add_rope_freq_base(float(self.rope.get("rope_theta", 1_000_000.0)))
        w.add_rope_freq_base_swa(self.local_rope_base())
        w.add_sliding_window(int(_require(c, "sliding_window")))
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
        ff = int(_require(c, "block_ff_dim", "intermediate_size"))
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
        w.add_context_length(int(_require(c, "max_position_embeddings")))
        w.add_embedding_length(self.n_embd)
        w.add_feed_forward_length(self.feed_forward_length())
        w.add_head_count(self.n_head)
        w.add_head_count_kv([self.n_head_kv if a else 0 for a in self.attention_layers])
        w.add_rope_freq_base(float(self.rope.get("rope_theta", 1_000_000.0)))
        w.add_vocab_size(int(_require(c, "vocab_size")))
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
        return int(_require(self.cfg, "intermediate_size"))

    def write_metadata(self, w: GGUFWriter) -> None:
        super().write_metadata(w)
        w.add_expert_count(self.n_expert)
        w.add_expert_used_count(self.n_expert_used)
        w.add_expert_feed_forward_length(int(_require(self.cfg, "moe_intermediate_size")))
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
        self.n_expert = int(_require(cfg, "num_local_experts", "num_experts"))
        self.n_expert_used = int(_require(cfg, "num_experts_per_tok", "experts_per_token"))
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
        w.add_sliding_window(int(_require(self.cfg, "sliding_window")))
        w.add_expert_feed_forward_length(int(_require(self.cfg, "intermediate_size")))

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
        return int(_require(self.cfg, "max_position_embeddings"))

    def write_metadata(self, w: GGUFWriter) -> None:
        c = self.cfg
        w.add_context_length(self.context_length())
        w.add_embedding_length(self.n_embd)
        w.add_feed_forward_length(int(_require(c, "intermediate_size")))
        w.add_block_count(self.n_layer)
        w.add_head_count(self.n_head)
        w.add_layer_norm_eps(float(c.get("layer_norm_eps", 1e-12)))
        w.add_causal_attention(False)
        w.add_token_type_count(int(c.get("type_vocab_size", 1)))
        w.add_vocab_size(int(_require(c, "vocab_size")))
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
        self.rope["rope_theta"] = float(_require(cfg, "rotary_emb_base"))

    def context_length(self) -> int:
        return int(self.cfg.get("max_trained_positions") or _require(self.cfg, "n_positions"))

    def write_metadata(self, w: GGUFWriter) -> None:
        c = self.cfg
        w.add_context_length(self.context_length())
        w.add_embedding_length(self.n_embd)
        w.add_feed_forward_length(int(_require(c, "n_inner")))
        w.add_block_count(self.n_layer)
        w.add_head_count(self.n_head)
        w.add_rope_freq_base(self.rope["rope_theta"])
        w.add_layer_norm_eps(float(c.get("layer_norm_epsilon", 1e-12)))
        w.add_causal_attention(False)
        w.add_token_type_count(int(c.get("type_vocab_size", 1)))
        w.add_vocab_size(int(_require(c, "vocab_size")))

    def derived(self, hf_name: str) -> bool:
        return hf_name.endswith(".rotary_emb.inv_freq") or super().derived(hf_name)


# config.json "architectures"[0] -> conversion
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
