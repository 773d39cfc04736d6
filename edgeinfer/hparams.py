"""The hyper-parameters Python reads from a model file's metadata, without loading the model.

The core reads every hyper-parameter itself when it loads a model (and `Model` exposes them), but
``edgeinfer info``, the placement plan and the quantizer look at files they do not load (or that
this version cannot run), so they read the few they need here: one place, with the key names of
the gguf package (``gguf.Keys``), never spelled by hand.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gguf import Keys


@dataclass(frozen=True)
class FileHParams:
    """What a GGUF file's metadata says of the model's shape; 0 (or None) where it says nothing.

    Head counts are per layer: a file may list one per layer (a layer without attention has 0),
    or give one value for all, which is then repeated."""

    arch: str
    n_layer: int = 0
    n_embd: int = 0
    n_head: tuple[int, ...] = ()
    n_head_kv: tuple[int, ...] = ()
    key_length: int = 0      # values per K head; 0 = not given (n_embd / n_head)
    value_length: int = 0    # values per V head; likewise
    n_expert: int = 0

    def kv_dims(self) -> tuple[int, int, int] | None:
        """(n_layer, k_dim, v_dim): layers, and K / V values per position of the widest layer;
        None if the file lacks the sizes."""
        if not (self.arch and self.n_layer and self.n_embd and self.n_head and self.n_head[0]):
            return None
        head_dim = self.n_embd // self.n_head[0]
        n_head_kv = max(self.n_head_kv)
        return self.n_layer, (self.key_length or head_dim) * n_head_kv, (self.value_length or head_dim) * n_head_kv


def read_hparams(gguf: Any) -> FileHParams:
    """The hyper-parameters in `gguf`'s metadata (a _core.GgufFile, or anything with its
    ``get(key, default)``)."""
    arch = gguf.get(Keys.General.ARCHITECTURE) or ""

    def get(key: str, default: Any = 0) -> Any:
        value = gguf.get(key.format(arch=arch))
        return default if value is None else value

    def per_layer(value: Any, n_layer: int) -> tuple[int, ...]:
        if isinstance(value, list):
            return tuple(int(v) for v in value)
        return (int(value),) * max(n_layer, 1) if value else ()

    n_layer = int(get(Keys.LLM.BLOCK_COUNT))
    n_head = per_layer(get(Keys.Attention.HEAD_COUNT), n_layer)
    n_head_kv = per_layer(get(Keys.Attention.HEAD_COUNT_KV, None), n_layer) or n_head
    return FileHParams(arch=arch, n_layer=n_layer, n_embd=int(get(Keys.LLM.EMBEDDING_LENGTH)), n_head=n_head,
                       n_head_kv=n_head_kv, key_length=int(get(Keys.Attention.KEY_LENGTH)),
                       value_length=int(get(Keys.Attention.VALUE_LENGTH)),
                       n_expert=int(get(Keys.LLM.EXPERT_COUNT) or 0))
