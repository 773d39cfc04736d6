"""Which type each tensor gets: llama.cpp's quantization presets (``llama-quantize``'s rules).

A preset (Q4_K_M, Q3_K_S, ...) names a default type and a few exceptions that spend more bits
where quantization hurts most: the output projection, the attention V projections and the FFN
down projections of some layers (``use_more_bits``: the first and last eighth of the layers and
every third one between). 1-D tensors (norms, biases) are never quantized. A tensor whose row
length is not a whole number of blocks of its type falls back to a type whose blocks fit, with a
notice. The rules follow llama.cpp's ``llama_tensor_get_type``, every preset's branches (the
i-quants' and MXFP4_MOE's included).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from gguf import GGMLQuantizationType as T
from gguf import Keys
from gguf import LlamaFileType as FT

from edgeinfer import _core
from edgeinfer.errors import EdgeInferError
from edgeinfer.wording import Ref, Wording

# preset name -> (general.file_type, default tensor type)
PRESETS: dict[str, tuple[FT, T]] = {
    "F32": (FT.ALL_F32, T.F32),
    "F16": (FT.MOSTLY_F16, T.F16),
    "BF16": (FT.MOSTLY_BF16, T.BF16),
    "Q4_0": (FT.MOSTLY_Q4_0, T.Q4_0),
    "Q4_1": (FT.MOSTLY_Q4_1, T.Q4_1),
    "Q5_0": (FT.MOSTLY_Q5_0, T.Q5_0),
    "Q5_1": (FT.MOSTLY_Q5_1, T.Q5_1),
    "Q8_0": (FT.MOSTLY_Q8_0, T.Q8_0),
    "Q2_K": (FT.MOSTLY_Q2_K, T.Q2_K),
    "Q2_K_S": (FT.MOSTLY_Q2_K_S, T.Q2_K),     # needs an importance matrix (requires_imatrix)
    "Q3_K_S": (FT.MOSTLY_Q3_K_S, T.Q3_K),
    "Q3_K_M": (FT.MOSTLY_Q3_K_M, T.Q3_K),
    "Q3_K_L": (FT.MOSTLY_Q3_K_L, T.Q3_K),
    "Q4_K_S": (FT.MOSTLY_Q4_K_S, T.Q4_K),
    "Q4_K_M": (FT.MOSTLY_Q4_K_M, T.Q4_K),
    "Q5_K_S": (FT.MOSTLY_Q5_K_S, T.Q5_K),
    "Q5_K_M": (FT.MOSTLY_Q5_K_M, T.Q5_K),
    "Q6_K": (FT.MOSTLY_Q6_K, T.Q6_K),
    "IQ4_NL": (FT.MOSTLY_IQ4_NL, T.IQ4_NL),
    "IQ4_XS": (FT.MOSTLY_IQ4_XS, T.IQ4_XS),
    # The 1-3-bit i-quants. IQ2_S and IQ2_M default to the type a step below their name, and
    # IQ3_XS is IQ3_S with IQ3_XXS in the middle layers' FFN gate and up and every attn_q / attn_k.
    # All but IQ3_S and IQ3_M put types that need an importance matrix on some tensor.
    "IQ2_XXS": (FT.MOSTLY_IQ2_XXS, T.IQ2_XXS),
    "IQ2_XS": (FT.MOSTLY_IQ2_XS, T.IQ2_XS),
    "IQ2_S": (FT.MOSTLY_IQ2_S, T.IQ2_XS),
    "IQ2_M": (FT.MOSTLY_IQ2_M, T.IQ2_S),
    "IQ3_XXS": (FT.MOSTLY_IQ3_XXS, T.IQ3_XXS),
    "IQ3_XS": (FT.MOSTLY_IQ3_XS, T.IQ3_S),
    "IQ3_S": (FT.MOSTLY_IQ3_S, T.IQ3_S),
    "IQ3_M": (FT.MOSTLY_IQ3_M, T.IQ3_S),
    "IQ1_S": (FT.MOSTLY_IQ1_S, T.IQ1_S),
    "IQ1_M": (FT.MOSTLY_IQ1_M, T.IQ1_M),
    # The ternary types: llama-quantize's presets differ from their default type only in the
    # token embeddings (Q4_K) and the output projection (Q6_K, as for most presets).
    "TQ1_0": (FT.MOSTLY_TQ1_0, T.TQ1_0),
    "TQ2_0": (FT.MOSTLY_TQ2_0, T.TQ2_0),
    # MXFP4 on the MoE expert stacks (3-D, one matrix per expert), Q8_0 on every other tensor
    # (llama.cpp's MXFP4_MOE).
    "MXFP4_MOE": (FT.MOSTLY_MXFP4_MOE, T.MXFP4),
}

# Types the core can write (quant/quantize.h); overrides must name one of these.
WRITABLE = (T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0,
            T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_NL, T.IQ4_XS, T.IQ3_XXS, T.IQ3_S, T.MXFP4, T.TQ1_0,
            T.TQ2_0, T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ1_S, T.IQ1_M)
PLAIN = (T.F32, T.F16, T.BF16)

# A type whose blocks do not fit the row falls back to this one (then to F16 if that fails too).
_FALLBACK = {T.Q2_K: T.Q4_0, T.Q3_K: T.Q4_0, T.Q4_K: T.Q5_0, T.Q5_K: T.Q5_1, T.Q6_K: T.Q8_0, T.IQ4_XS: T.IQ4_NL,
             T.TQ1_0: T.Q4_0, T.TQ2_0: T.Q4_0,
             T.IQ1_S: T.IQ4_NL, T.IQ1_M: T.IQ4_NL, T.IQ2_XXS: T.IQ4_NL, T.IQ2_XS: T.IQ4_NL, T.IQ2_S: T.IQ4_NL,
             T.IQ3_XXS: T.IQ4_NL, T.IQ3_S: T.IQ4_NL}
_IQ4 = (FT.MOSTLY_IQ4_NL, FT.MOSTLY_IQ4_XS)
# The 1-2-bit presets, which llama.cpp gives rules of their own (_Planner._low_bit_rules).
_IQ1_2 = (FT.MOSTLY_IQ2_XXS, FT.MOSTLY_IQ2_XS, FT.MOSTLY_IQ2_S, FT.MOSTLY_IQ2_M, FT.MOSTLY_IQ1_S, FT.MOSTLY_IQ1_M)
_IQ2_SM = (FT.MOSTLY_IQ2_S, FT.MOSTLY_IQ2_M)
_IQ1 = (FT.MOSTLY_IQ1_S, FT.MOSTLY_IQ1_M)
# Presets whose output projection is Q5_K rather than Q6_K.
_Q5K_OUTPUT = (*_IQ1_2, FT.MOSTLY_IQ3_XXS)
_TERNARY = (FT.MOSTLY_TQ1_0, FT.MOSTLY_TQ2_0)

# Never quantized although 2-D and named "*weight" (small or precision-critical tables).
_KEEP_SUBSTRINGS = ("_norm.weight", "ffn_gate_inp.weight", "altup", "laurel", "per_layer_model_proj",
                    "ssm_conv1d", "shortconv.conv.weight", "attn_rel_b.weight", "time_mix_",
                    ".position_embd", ".patch_embd", ".rel_pos")
_KEEP_NAMES = ("position_embd.weight", "token_types.weight")


def parse_type(name: str) -> T:
    """'q6_k', 'Q8_0', 'f16' -> the ggml type, if the core can write it."""
    try:
        qtype = T[name.upper()]
    except KeyError:
        qtype = None
    if qtype not in WRITABLE:
        raise EdgeInferError(f"unknown or unsupported tensor type {name!r}; one of: "
                             + ", ".join(t.name for t in WRITABLE))
    return qtype


def parse_tensor_type(spec: str) -> tuple[re.Pattern[str], T]:
    """'attn_v=q8_0' -> (regex searched in tensor names, type), like llama-quantize's --tensor-type."""
    pattern, sep, type_name = spec.rpartition("=")
    if not sep or not pattern:
        raise EdgeInferError(Wording("", Ref("tensor_types"), f" rule {spec!r} is not REGEX=TYPE"))
    try:
        return re.compile(pattern), parse_type(type_name)
    except re.error as exc:
        raise EdgeInferError(Wording("", Ref("tensor_types"), f" rule {spec!r}: bad regular expression ({exc})")) from None


@dataclass
class QuantizeOptions:
    preset: str
    pure: bool = False                           # the preset's default type everywhere
    output_tensor_type: T | None = None
    token_embedding_type: T | None = None
    tensor_types: list[tuple[re.Pattern[str], T]] = field(default_factory=list)
    allow_requantize: bool = False
    has_imatrix: bool = False                    # an importance matrix is given (some rules differ)


@dataclass
class ModelShape:
    """The hyper-parameters the presets look at. Read from the file's metadata here, not by the core,
    because a file of any architecture can be quantized, as with llama.cpp's quantizer, including
    ones the core does not run yet (whose heads may be listed per layer)."""
    arch: str
    n_layer: int
    n_head: int
    n_head_kv: int
    n_expert: int = 0

    @property
    def n_gqa(self) -> int:
        return self.n_head // self.n_head_kv if self.n_head_kv else 0

    @classmethod
    def from_metadata(cls, gguf: Any) -> "ModelShape":
        """The shape in `gguf`'s metadata (a _core.GgufFile, or anything with its ``get(key)``), 0
        where it says nothing; per-layer head counts count by their first layer's, as llama.cpp's
        presets do."""
        arch = gguf.get(Keys.General.ARCHITECTURE) or ""

        def get(key: str, default: int = 0) -> int:
            value = gguf.get(key.format(arch=arch))
            if isinstance(value, list):
                value = value[0] if value else None
            return default if value is None else int(value)

        n_head = get(Keys.Attention.HEAD_COUNT)
        return cls(arch=arch, n_layer=get(Keys.LLM.BLOCK_COUNT), n_head=n_head,
                   n_head_kv=get(Keys.Attention.HEAD_COUNT_KV, n_head),
                   n_expert=get(Keys.LLM.EXPERT_COUNT))


@dataclass
class TensorInfo:
    name: str
    shape: list[int]      # ne order: shape[0] is the row length
    type: T


@dataclass
class TensorPlan:
    name: str
    shape: list[int]
    src_type: T
    dst_type: T
    notice: str | None = None   # why the type differs from what the rules asked for


def _layer_of(name: str) -> int:
    m = re.match(r"blk\.(\d+)\.", name)
    return int(m.group(1)) if m else -1


def tensor_order(tensors: Iterable[TensorInfo]) -> list[TensorInfo]:
    """llama.cpp's order (by layer number, then name): the layer counters of the presets
    (i-th attn_v, i-th ffn_down) count in this order, and the file is written in it."""
    return sorted(tensors, key=lambda t: (_layer_of(t.name), t.name))


def _n_dims(shape: list[int]) -> int:
    n = len(shape)
    while n > 1 and shape[n - 1] == 1:
        n -= 1
    return n


def allows_quantization(t: TensorInfo) -> bool:
    """2-D (or 3-D) weights only; norms, position tables and a few small tables stay as they are."""
    if _n_dims(t.shape) < 2 or not t.name.endswith("weight"):
        return False
    return not any(s in t.name for s in _KEEP_SUBSTRINGS) and t.name not in _KEEP_NAMES


def _category(name: str) -> str:
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    for key, cat in (("attn_qkv.weight", "attn_qkv"), ("attn_kv_b.weight", "attn_kv_b"),
                     ("attn_v.weight", "attn_v"), ("attn_k.weight", "attn_k"), ("attn_q.weight", "attn_q"),
                     ("attn_output.weight", "attn_output"), ("ffn_up", "ffn_up"),
                     ("ffn_gate", "ffn_gate"), ("ffn_down", "ffn_down")):
        if key in name:
            return cat
    return "other"


# Types whose quantizers give garbage without importance weights (llama.cpp refuses them then).
_NEED_IMATRIX = (T.IQ3_XXS, T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ1_M, T.IQ1_S)


def requires_imatrix(name: str, dst_type: T, ftype: FT) -> bool:
    """Whether quantizing tensor `name` to `dst_type` under preset `ftype` needs an importance
    matrix, as llama-quantize decides: the 1-3-bit i-quants, and Q2_K inside a Q2_K_S file; never
    the token embeddings or the output projection."""
    if _category(name) in ("token_embd", "output"):
        return False
    if dst_type == T.Q2_K:
        return ftype == FT.MOSTLY_Q2_K_S
    return dst_type in _NEED_IMATRIX


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """The layers llama.cpp's _M presets give more bits: first and last eighth, every third between."""
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


def block_size(qtype: T) -> int:
    """Elements per block, from the core's type table."""
    return int(_core.type_info(int(qtype))["block_size"])


class _Planner:
    def __init__(self, shape: ModelShape, options: QuantizeOptions, tensors: list[TensorInfo]):
        self.shape = shape
        self.options = options
        self.ftype, self.default_type = PRESETS[options.preset]
        cats = [_category(t.name) for t in tensors]
        self.n_attention_wv = sum(c in ("attn_v", "attn_qkv", "attn_kv_b") for c in cats)
        self.tied = "output" not in cats          # token_embd doubles as the output projection
        self.i_attention_wv = 0
        self.i_ffn_down = 0
        self.i_ffn_gate = 0
        self.i_ffn_up = 0

    def plan(self, t: TensorInfo) -> TensorPlan:
        opts = self.options
        if not allows_quantization(t):
            return TensorPlan(t.name, t.shape, t.type, t.type)
        cat = _category(t.name)
        if opts.token_embedding_type is not None and cat == "token_embd":
            return self._fit(t, opts.token_embedding_type)
        if opts.output_tensor_type is not None and cat == "output":
            return self._fit(t, opts.output_tensor_type)
        new_type = self.default_type
        if new_type in PLAIN:
            return TensorPlan(t.name, t.shape, t.type, new_type)
        manual = False
        for pattern, qtype in opts.tensor_types:
            if pattern.search(t.name):
                new_type, manual = qtype, True
                break
        if not manual and not opts.pure:
            new_type = self._preset_rules(t, cat, new_type)
        return self._fit(t, new_type)

    def _preset_rules(self, t: TensorInfo, cat: str, new_type: T) -> T:
        ft, s = self.ftype, self.shape
        if cat == "output" or (self.tied and cat == "token_embd"):
            if self.options.output_tensor_type is not None:
                return self.options.output_tensor_type
            if ft == FT.MOSTLY_MXFP4_MOE or s.arch == "falcon" or t.shape[0] % block_size(new_type) != 0:
                return T.Q8_0
            if ft in _Q5K_OUTPUT:
                return T.Q5_K
            return new_type if new_type == T.Q8_0 else T.Q6_K
        if ft == FT.MOSTLY_MXFP4_MOE:   # expert stacks in MXFP4, everything else Q8_0
            return T.MXFP4 if len(t.shape) > 2 and t.shape[2] > 1 else T.Q8_0
        if cat == "token_embd":
            if ft in (FT.MOSTLY_IQ2_XXS, FT.MOSTLY_IQ2_XS, *_IQ1):
                return T.Q2_K
            if ft in (*_IQ2_SM, FT.MOSTLY_IQ3_XXS):
                return T.IQ3_S
            return T.Q4_K if ft in _TERNARY else new_type
        if ft in _IQ1_2:
            return self._low_bit_rules(cat, new_type)
        if cat in ("attn_v", "attn_qkv", "attn_kv_b"):
            i = self.i_attention_wv
            if ft == FT.MOSTLY_Q2_K:
                new_type = T.Q4_K if s.n_gqa >= 4 else T.Q3_K
            elif ft == FT.MOSTLY_Q2_K_S and s.n_gqa >= 4:
                new_type = T.Q4_K
            elif ft == FT.MOSTLY_IQ3_XXS:
                new_type = T.Q4_K if s.n_gqa >= 4 else T.IQ3_XXS if self.options.has_imatrix else T.IQ3_S
            elif ft in (FT.MOSTLY_IQ3_XS, FT.MOSTLY_IQ3_S) and s.n_gqa >= 4:
                new_type = T.Q4_K
            elif ft == FT.MOSTLY_IQ3_M:
                new_type = T.Q4_K
            elif ft == FT.MOSTLY_Q3_K_M:
                new_type = T.Q5_K if i < 2 else T.Q4_K
            elif ft == FT.MOSTLY_Q3_K_L:
                new_type = T.Q5_K
            elif ft in _IQ4 and s.n_gqa >= 4:
                new_type = T.Q5_K
            elif ft in (FT.MOSTLY_Q4_K_M, FT.MOSTLY_Q5_K_M) and use_more_bits(i, self.n_attention_wv):
                new_type = T.Q6_K
            elif ft == FT.MOSTLY_Q4_K_S and i < 4:
                new_type = T.Q5_K
            if s.n_expert == 8:
                new_type = T.Q8_0
            self.i_attention_wv += 1
            return new_type
        if cat == "attn_k" and s.n_expert == 8:
            return T.Q8_0
        if cat in ("attn_k", "attn_q"):
            return {FT.MOSTLY_IQ3_XS: T.IQ3_XXS, FT.MOSTLY_IQ3_XXS: T.IQ2_S}.get(ft, new_type)
        if cat == "ffn_down":
            i, n = self._layer(t.name, self.i_ffn_down)
            if ft == FT.MOSTLY_Q2_K:
                new_type = T.Q3_K
            elif ft == FT.MOSTLY_Q2_K_S:
                if i < n // 8:
                    new_type = T.Q4_K
            elif ft == FT.MOSTLY_IQ3_XXS and not self.options.has_imatrix:
                new_type = T.Q4_K if i < n // 8 else T.Q3_K
            elif ft == FT.MOSTLY_Q3_K_M:
                new_type = (T.Q5_K if i < n // 16 else
                            T.Q4_K if s.arch != "falcon" or use_more_bits(i, n) else T.Q3_K)
            elif ft == FT.MOSTLY_IQ3_M and (i < n // 8 or (s.n_expert == 8 and use_more_bits(i, n))):
                new_type = T.Q4_K
            elif ft == FT.MOSTLY_Q3_K_L:
                new_type = T.Q4_K if s.arch == "falcon" else T.Q5_K
            elif ft == FT.MOSTLY_Q4_K_M:
                if s.arch == "falcon":
                    new_type = T.Q6_K if i < n // 16 else T.Q5_K if use_more_bits(i, n) else T.Q4_K
                elif use_more_bits(i, n):
                    new_type = T.Q6_K
            elif ft in _IQ4 and i < n // 8 and not self.options.has_imatrix:
                new_type = T.Q5_K
            elif ft == FT.MOSTLY_Q5_K_M and use_more_bits(i, n):
                new_type = T.Q6_K
            elif ft == FT.MOSTLY_Q4_K_S and s.arch != "falcon" and i < n // 8:
                new_type = T.Q5_K
            elif ft in (FT.MOSTLY_Q4_0, FT.MOSTLY_Q5_0) and self.options.has_imatrix and i < n // 8:
                # llama.cpp guards the first layers' ffn_down this way only with an importance
                # matrix, so that quantizing without one keeps giving the files it always gave.
                new_type = T.Q4_1 if ft == FT.MOSTLY_Q4_0 else T.Q5_1
            self.i_ffn_down += 1
            return new_type
        if cat == "attn_output":
            if s.arch == "falcon":
                return T.Q4_K if ft == FT.MOSTLY_Q3_K_L else new_type
            if s.n_expert == 8:
                if ft in (FT.MOSTLY_Q2_K, FT.MOSTLY_Q3_K_S, FT.MOSTLY_Q3_K_M, FT.MOSTLY_Q4_K_S, FT.MOSTLY_Q4_K_M, *_IQ4,
                          FT.MOSTLY_IQ3_XXS, FT.MOSTLY_IQ3_XS, FT.MOSTLY_IQ3_S, FT.MOSTLY_IQ3_M):
                    return T.Q5_K
                return new_type
            return {FT.MOSTLY_Q2_K: T.Q3_K, FT.MOSTLY_IQ3_XXS: T.IQ3_S, FT.MOSTLY_Q3_K_M: T.Q4_K,
                    FT.MOSTLY_Q3_K_L: T.Q5_K, FT.MOSTLY_IQ3_M: T.Q4_K}.get(ft, new_type)
        if cat in ("ffn_gate", "ffn_up"):
            # IQ3_XS: the middle three quarters of the layers drop to IQ3_XXS.
            counter = self.i_ffn_gate if cat == "ffn_gate" else self.i_ffn_up
            i, n = self._layer(t.name, counter)
            if cat == "ffn_gate":
                self.i_ffn_gate += 1
            else:
                self.i_ffn_up += 1
            if ft == FT.MOSTLY_IQ3_XS and n // 8 <= i < 7 * n // 8:
                return T.IQ3_XXS
        return new_type

    def _low_bit_rules(self, cat: str, new_type: T) -> T:
        """llama.cpp's rules for the 1-2-bit i-quant presets (_IQ1_2), past the output and token
        embeddings: a few more bits for attn_v, the first eighth of ffn_down and attn_output."""
        ft, s = self.ftype, self.shape
        if cat in ("attn_v", "attn_qkv", "attn_kv_b"):
            self.i_attention_wv += 1
            if s.n_gqa >= 4 or s.n_expert >= 4:
                return T.Q4_K
            return T.IQ3_S if ft in _IQ2_SM else T.Q2_K
        if cat == "attn_k" and s.n_expert == 8:
            return T.Q4_K
        if cat == "ffn_down":
            # The count of ffn_down tensors so far, even with experts (as llama.cpp counts here).
            i = self.i_ffn_down
            self.i_ffn_down += 1
            if i < s.n_layer // 8:
                return T.IQ3_S if ft in _IQ2_SM else T.Q2_K
            return new_type
        if cat == "attn_output":
            if s.n_expert == 8:
                return T.Q5_K
            if ft in _IQ1:
                return T.IQ2_XXS
            if ft in _IQ2_SM:
                return T.IQ3_S
        return new_type

    def _layer(self, name: str, counter: int) -> tuple[int, int]:
        """(layer index, layer count) for the FFN rules: the tensor's position among its kind,
        or with experts the layer number in its name (experts are not stored in layer order)."""
        if self.shape.n_expert > 1:
            layer = _layer_of(name)
            if not 0 <= layer < self.shape.n_layer:
                raise EdgeInferError(f"cannot tell the layer of tensor {name}")
            return layer, self.shape.n_layer
        return counter, self.shape.n_layer

    def _fit(self, t: TensorInfo, new_type: T) -> TensorPlan:
        ncols = t.shape[0]
        if ncols % block_size(new_type) == 0:
            return TensorPlan(t.name, t.shape, t.type, new_type)
        fallback = _FALLBACK.get(new_type, new_type)
        if ncols % block_size(fallback) != 0:
            fallback = T.F16
        notice = (f"{t.name}: rows of {ncols} are not a multiple of {block_size(new_type)} "
                  f"(the {new_type.name} block), using {fallback.name}")
        return TensorPlan(t.name, t.shape, t.type, fallback, notice)


def make_plan(tensors: Iterable[TensorInfo], shape: ModelShape, options: QuantizeOptions) -> list[TensorPlan]:
    """The type of every tensor, in the order the output file stores them."""
    if options.preset not in PRESETS:
        raise EdgeInferError(f"unknown quantization type {options.preset!r}; one of: {', '.join(PRESETS)}")
    ordered = tensor_order(tensors)
    planner = _Planner(shape, options, ordered)
    return [planner.plan(t) for t in ordered]
