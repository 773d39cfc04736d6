"""`convert_checkpoint`: a Hugging Face checkpoint folder -> one GGUF file that llama.cpp and
edgeinfer load. Reads config and tokenizer, names every tensor (the family's class, architectures.py), chooses each
tensor's type with the quantize presets (quantize/plan.py: ``f16`` keeps norms in F32, ``q4_k_m``
gives the output projection Q6_K, ...), then converts and writes one tensor at a time, so memory
stays near the largest single tensor."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
from gguf import GGML_QUANT_VERSION, PoolingType
from gguf import GGMLQuantizationType as T

from edgeinfer import _core
from edgeinfer.convert.architectures import architecture_for
from edgeinfer.convert.base import Architecture
from edgeinfer.convert.checkpoint import Checkpoint
from edgeinfer.convert.writer import StreamedGGUF
from edgeinfer.errors import EdgeInferError, ModelFormatError
from edgeinfer.output_file import check_output_path
from edgeinfer.quantize.plan import PRESETS, ModelShape, QuantizeOptions, TensorInfo, TensorPlan, make_plan
from edgeinfer.quantize.run import tensor_nbytes
from edgeinfer.threads import resolve_n_threads, usable_cpus

OUTTYPES = tuple(p.lower() for p in PRESETS)


@dataclass
class ConvertResult:
    arch: str
    plans: list[TensorPlan]
    n_elements: int
    bytes_out: int
    seconds: float
    pre_tokenizer: str


@dataclass
class _Source:
    """Where a GGUF tensor's values come from: a checkpoint tensor (transformed), or computed."""
    load: Callable[[], np.ndarray]
    ne: list[int]


def _sources(ckpt: Checkpoint, arch: Architecture) -> dict[str, _Source]:
    sources: dict[str, _Source] = {}
    stacks = arch.stacks(ckpt.tensors)
    for name, parts in stacks.items():
        ts = [ckpt.tensors[p] for p in parts]
        if len({t.shape for t in ts}) != 1:
            raise ModelFormatError(f"{ckpt.folder}: the tensors stacked into {name} differ in shape")

        def load_stack(ts=ts, name=name) -> np.ndarray:
            return np.stack([arch.transform(name, t.load()) for t in ts])

        sources[name] = _Source(load_stack, list(reversed((len(ts), *arch.transformed_shape(name, ts[0].shape)))))
    splits = arch.splits(ckpt.tensors)
    for name, (hf_name, take, shape_of) in splits.items():
        t = ckpt.tensors[hf_name]

        def load_part(t=t, take=take) -> np.ndarray:
            return take(t.load())

        sources[name] = _Source(load_part, list(reversed(shape_of(tuple(t.shape)))))
    stacked = {p for parts in stacks.values() for p in parts} | {hf for hf, _, _ in splits.values()}
    for hf_name, t in ckpt.tensors.items():
        if arch.derived(hf_name) or hf_name in stacked:
            continue
        name = arch.gguf_name(hf_name)
        if name is None:
            raise ModelFormatError(f"{ckpt.folder}: tensor {hf_name} has no GGUF name for {arch.name} "
                                   "(an architecture variant this converter does not know)")
        if name in sources:
            raise ModelFormatError(f"{ckpt.folder}: tensors {hf_name} and another both map to {name}")

        def load(t=t, name=name) -> np.ndarray:
            return arch.transform(name, t.load())

        sources[name] = _Source(load, list(reversed(arch.transformed_shape(name, t.shape))))
    for name, data in arch.extra_tensors().items():
        sources[name] = _Source(lambda data=data: data, list(reversed(data.shape)))
    if "token_embd.weight" not in sources:
        raise ModelFormatError(f"{ckpt.folder}: no token embedding among the weights")
    return sources


# generation_config.json field -> GGUF general.sampling.* writer (llama.cpp's converter writes the
# model's recommended sampling defaults the same way)
_SAMPLING = (("temperature", "add_sampling_temp", float), ("top_k", "add_sampling_top_k", int),
             ("top_p", "add_sampling_top_p", float), ("min_p", "add_sampling_min_p", float),
             ("repetition_penalty", "add_sampling_penalty_repeat", float))


def sentence_transformers_pooling(folder: Path) -> PoolingType | None:
    """The pooling of a sentence-transformers folder (modules.json -> its Pooling module's
    config.json), as llama.cpp's converter reads it (_try_set_pooling_type); None without one."""
    modules = folder / "modules.json"
    if not modules.is_file():
        return None
    path = next((m["path"] for m in json.loads(modules.read_text(encoding="utf-8"))
                 if str(m.get("type", "")).endswith("Pooling")), None)
    if path is None:
        return None
    cfg = json.loads((folder / path / "config.json").read_text(encoding="utf-8"))
    if cfg.get("pooling_mode_mean_tokens"):
        return PoolingType.MEAN
    if cfg.get("pooling_mode_cls_token"):
        return PoolingType.CLS
    if cfg.get("pooling_mode_lasttoken"):
        return PoolingType.LAST
    modes = {"mean": PoolingType.MEAN, "cls": PoolingType.CLS, "lasttoken": PoolingType.LAST}
    if cfg.get("pooling_mode") in modes:
        return modes[cfg["pooling_mode"]]
    raise ModelFormatError(f"{folder / path / 'config.json'}: a pooling this converter does not know")


def _write_sampling_defaults(w, generation_config: dict) -> None:
    for field, method, kind in _SAMPLING:
        value = generation_config.get(field)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            getattr(w, method)(kind(value))


def _encode(data: np.ndarray, qtype: T, n_threads: int) -> np.ndarray:
    x = np.ascontiguousarray(data, dtype=np.float32)
    if qtype == T.F32:
        return x
    rows = x.reshape(-1, x.shape[-1] if x.ndim else 1)
    return np.asarray(_core.quantize_rows(int(qtype), rows, n_threads))


def convert_checkpoint(
    folder: str | Path,
    out_path: str | Path,
    outtype: str = "f16",
    n_threads: int | None = None,
    on_plan: Callable[[list[TensorPlan]], None] | None = None,
    on_tensor: Callable[[TensorPlan, int], None] | None = None,
    force: bool = False,
) -> ConvertResult:
    """Converts the checkpoint in `folder` to `out_path` with tensors of `outtype` (f32, f16, bf16,
    q8_0, q4_k_m, ... the quantize presets), quantizing on `n_threads` threads (None: every usable
    CPU; more: capped, with a warning). `on_plan(plans)` is called before data is written,
    `on_tensor(plan, bytes_out)` after each tensor. An `out_path` that cannot be written (see
    edgeinfer.output_file; an existing file needs `force`) is an EdgeInferError before any work.
    Nothing is left at `out_path` on failure."""
    start = time.perf_counter()
    preset = outtype.upper()
    if preset not in PRESETS:
        raise EdgeInferError(f"unknown output type {outtype!r}; one of: {', '.join(OUTTYPES)}")
    out_path = Path(out_path)
    check_output_path(out_path, inputs=[folder], force=force)
    n_threads = resolve_n_threads(n_threads, default=usable_cpus(), stacklevel=2)
    ckpt = Checkpoint(folder)
    arch = architecture_for(ckpt.architecture, ckpt.config)
    n_vocab = int(ckpt.config["vocab_size"]) if ckpt.config.get("vocab_size") else None
    vocab = arch.vocabulary(ckpt.folder, n_vocab)
    arch.read_folder(ckpt.folder, vocab)
    sources = _sources(ckpt, arch)

    infos = [TensorInfo(name, s.ne, T.F32) for name, s in sources.items()]
    shape = ModelShape(arch=arch.name, n_layer=arch.n_layer, n_head=arch.n_head, n_head_kv=arch.n_head_kv,
                       n_expert=arch.n_expert)
    plans = make_plan(infos, shape, QuantizeOptions(preset=preset))
    for p in plans:
        if p.dst_type != T.F32 and not _core.has_quantizer(int(p.dst_type)):
            raise EdgeInferError(f"{p.name}: cannot write type {p.dst_type.name}")
    if on_plan:
        on_plan(plans)

    bytes_out = n_elements = 0
    with StreamedGGUF(out_path, arch.name) as out:
        w = out.writer
        w.add_name(ckpt.folder.name)
        arch.write_metadata(w)
        pooling = getattr(arch, "pooling", None) or sentence_transformers_pooling(ckpt.folder)
        if pooling is not None:
            w.add_pooling_type(pooling)
        w.add_file_type(int(PRESETS[preset][0]))
        w.add_quantization_version(GGML_QUANT_VERSION)
        vocab.write(w)
        _write_sampling_defaults(w, ckpt.generation_config)
        for p in plans:
            out.add_tensor_info(p.name, p.shape, p.dst_type, tensor_nbytes(p.dst_type, p.shape))
        out.start_data()
        for p in plans:
            data = sources[p.name].load()
            if list(reversed(data.shape)) != p.shape:
                raise ModelFormatError(f"{p.name}: shape {list(data.shape)} after conversion, expected "
                                       f"{list(reversed(p.shape))}")
            encoded = _encode(data, p.dst_type, n_threads)
            out.write_tensor(encoded)
            bytes_out += encoded.nbytes
            n_elements += data.size
            if on_tensor:
                on_tensor(p, encoded.nbytes)
        out.commit()
    return ConvertResult(arch=arch.name, plans=plans, n_elements=n_elements, bytes_out=bytes_out,
                         seconds=time.perf_counter() - start, pre_tokenizer=vocab.pre)
