"""The llama family's conversion, which every other family adjusts (decoders.py, encoders.py):
the hyper-parameter keys written, the tensor names from gguf-py's TensorNameMap (llama.cpp's one
table of HF -> GGUF names) and the hooks a family overrides."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
from gguf import MODEL_ARCH, MODEL_ARCH_NAMES, GGUFWriter, TensorNameMap, get_tensor_name_map

from edgeinfer.convert.rope import llama3_rope_factors, permute_rope_rows, rope_parameters, write_rope_scaling, yarn_metadata
from edgeinfer.convert.vocab import Vocabulary, load_vocabulary
from edgeinfer.errors import ModelFormatError


def config_value(cfg: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    raise ModelFormatError(f"config.json has no {' / '.join(keys)}")


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
        self.n_layer = int(config_value(cfg, "num_hidden_layers", "n_layer"))
        self.n_embd = int(config_value(cfg, "hidden_size", "n_embd"))
        self.n_head = int(config_value(cfg, "num_attention_heads", "n_head"))
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
        w.add_context_length(int(config_value(c, "max_position_embeddings", "n_ctx", "n_positions")))
        w.add_embedding_length(self.n_embd)
        w.add_feed_forward_length(int(config_value(c, "intermediate_size", "n_inner")))
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
        w.add_vocab_size(int(config_value(c, "vocab_size")))
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
