"""`quantize_file`: read a GGUF model, choose each tensor's type (plan.py), convert tensor by
tensor in the core and stream the result to a new GGUF file (writer.py).

Memory stays near one slab of rows in float32 plus its quantized copy: the input is read through
the core's read-only mapping, a tensor at a time, in slabs of at most `SLAB_BYTES` of floats."""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
from gguf import GGML_QUANT_VERSION
from gguf import GGMLQuantizationType as T

from edgeinfer import _core
from edgeinfer.errors import EdgeInferError
from edgeinfer.output_file import check_output_path
from edgeinfer.quantize.imatrix_file import ImportanceMatrix, imatrix_metadata
from edgeinfer.quantize.plan import (PLAIN, PRESETS, ModelShape, QuantizeOptions, TensorInfo, TensorPlan,
                                     make_plan, requires_imatrix)
from edgeinfer.quantize.writer import GGUFOutput, OutTensor, read_raw_metadata, set_kv, uint32_kv
from edgeinfer.threads import resolve_n_threads, usable_cpus

SLAB_BYTES = 64 << 20


def tensor_nbytes(qtype: int, shape: list[int]) -> int:
    """Bytes of a tensor of `shape` (ne order) stored as `qtype` (sizes from the core's table)."""
    info = _core.type_info(int(qtype))
    block, size = info["block_size"], info["type_size"]
    rows = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
    return rows * (shape[0] // block) * size


@dataclass
class QuantizeResult:
    plans: list[TensorPlan]
    bytes_in: int            # tensor data, input
    bytes_out: int           # tensor data, output
    n_elements: int
    seconds: float
    file_size_in: int
    file_size_out: int
    notices: list[str] = field(default_factory=list)

    @property
    def bpw_in(self) -> float:
        return 8.0 * self.bytes_in / max(self.n_elements, 1)

    @property
    def bpw_out(self) -> float:
        return 8.0 * self.bytes_out / max(self.n_elements, 1)


def _to_float(raw: np.ndarray, qtype: int, n: int) -> np.ndarray:
    """Rows of the input tensor as float32 (the core's to_float for quantized types)."""
    if qtype == T.F32:
        return raw.view(np.float32)
    if qtype == T.F16:
        return raw.view(np.float16).astype(np.float32)
    if qtype == T.BF16:
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return _core.dequantize(int(qtype), np.ascontiguousarray(raw), n)


def _importance_weights(plans: list[TensorPlan], options: QuantizeOptions,
                        imatrix: ImportanceMatrix | None) -> dict[str, np.ndarray]:
    """Each quantized tensor's importance weights, checked before any work as llama-quantize checks
    them: a tensor whose type needs them and has none is refused, as is one whose entry is not a
    row's length, or for a stack of matrices (MoE experts, ne[2] of them) a row's length per
    matrix (except the token embeddings, which llama-imatrix never sees)."""
    ftype, _ = PRESETS[options.preset]
    out: dict[str, np.ndarray] = {}
    for p in plans:
        if p.src_type == p.dst_type:
            continue
        w = imatrix.weights(p.name) if imatrix is not None else None
        n_mat = p.shape[2] if len(p.shape) > 2 else 1
        if w is not None and w.size != p.shape[0] * n_mat:
            if p.name == "token_embd.weight":
                w = None
            else:
                per = f"{p.shape[0]} for each of its {n_mat} matrices" if n_mat > 1 else f"{p.shape[0]}"
                raise EdgeInferError(f"the importance matrix has {w.size} values for {p.name}, whose rows have "
                                     f"{per}: it was made for another model")
        if w is None and requires_imatrix(p.name, p.dst_type, ftype):
            reason = ("an importance matrix (edgeinfer imatrix MODEL -f TEXT, then --imatrix FILE)"
                      if imatrix is None else f"importance weights for {p.name}, which the importance matrix lacks")
            raise EdgeInferError(f"{options.preset} needs {reason}: without them {p.dst_type.name} "
                                 f"quantization of {p.name} loses most of the model's quality")
        if w is not None:
            out[p.name] = w
    return out


def plan_file(src: _core.GgufFile, options: QuantizeOptions) -> list[TensorPlan]:
    tensors = [TensorInfo(t["name"], list(t["shape"]), T(t["type"])) for t in src.tensors()]
    return make_plan(tensors, ModelShape.from_metadata(src), options)


def quantize_file(
    src_path: str | Path,
    dst_path: str | Path,
    options: QuantizeOptions,
    n_threads: int | None = None,
    on_plan: Callable[[list[TensorPlan]], None] | None = None,
    on_tensor: Callable[[TensorPlan, int, int], None] | None = None,
    force: bool = False,
    imatrix: ImportanceMatrix | None = None,
    imatrix_path: str | Path | None = None,
) -> QuantizeResult:
    """Writes `dst_path` as `src_path` converted with `options`, on `n_threads` threads (None: every
    usable CPU; more: capped, with a warning). `on_plan(plans)` is called once before any data is
    written; `on_tensor(plan, bytes_in, bytes_out)` after each tensor.
    Raises EdgeInferError, before any work, when `dst_path` cannot be written (see
    edgeinfer.output_file: it is the input, a folder, in a missing or read-only folder, or exists
    and not `force`); and for a quantized input without `allow_requantize`, an unknown type or a
    tensor type the core cannot read; the output file is then not created.
    `imatrix` (read from `imatrix_path`, recorded in the output's metadata as llama-quantize does):
    importance weights for the quantizers; a preset that needs one and has none is refused, as is
    an importance matrix whose size does not match a tensor's rows."""
    start = time.perf_counter()
    src_path, dst_path = Path(src_path), Path(dst_path)
    check_output_path(dst_path, inputs=[src_path], force=force)
    n_threads = resolve_n_threads(n_threads, default=usable_cpus(), stacklevel=2)
    src = _core.GgufFile(str(src_path))
    plans = plan_file(src, options)
    requant = [p for p in plans if p.src_type != p.dst_type and p.src_type not in PLAIN]
    if requant and not options.allow_requantize:
        raise EdgeInferError(f"the input is already quantized ({requant[0].name} is {requant[0].src_type.name}); "
                             "requantizing loses more quality than quantizing the original F32/F16/BF16 "
                             "weights — pass --allow-requantize to do it anyway")
    if requant:
        warnings.warn(f"requantizing {len(requant)} tensors from quantized types: the result is worse than "
                      "quantizing the original weights", stacklevel=2)
    for p in plans:
        if p.src_type != p.dst_type and not _core.has_quantizer(int(p.dst_type)):
            raise EdgeInferError(f"{p.name}: cannot write type {p.dst_type.name}")
    weights = _importance_weights(plans, options, imatrix)
    if on_plan:
        on_plan(plans)

    ftype, _ = PRESETS[options.preset]
    _version, metadata = read_raw_metadata(src_path)
    metadata = set_kv(metadata, uint32_kv("general.quantization_version", GGML_QUANT_VERSION))
    metadata = set_kv(metadata, uint32_kv("general.file_type", int(ftype)))
    if imatrix is not None:
        metadata += imatrix_metadata(imatrix, imatrix_path, len(imatrix.entries))
    out_tensors = [OutTensor(p.name, p.shape, int(p.dst_type), tensor_nbytes(p.dst_type, p.shape)) for p in plans]

    bytes_in = bytes_out = n_elements = 0
    with GGUFOutput(dst_path, metadata, out_tensors) as out:
        for p, ot in zip(plans, out_tensors):
            raw = src.tensor_data(p.name)
            n_per_row = p.shape[0]
            n = int(np.prod(p.shape, dtype=np.int64))
            if p.src_type == p.dst_type:
                out.write_tensor_data(memoryview(raw))
            else:
                nrows = n // n_per_row
                row_in = tensor_nbytes(p.src_type, [n_per_row])
                slab = max(1, min(nrows, SLAB_BYTES // (4 * n_per_row)))
                # Importance weights per matrix of a stack (n_mat rows of `n_per_row` each), as
                # llama-quantize quantizes a 3-D tensor matrix by matrix; slabs stay inside one.
                w = weights.get(p.name)
                n_mat = 1 if w is None else w.size // n_per_row
                rows_per_mat = nrows // n_mat
                for m in range(n_mat):
                    w_m = None if w is None else w[m * n_per_row:(m + 1) * n_per_row]
                    for r0 in range(m * rows_per_mat, (m + 1) * rows_per_mat, slab):
                        r1 = min((m + 1) * rows_per_mat, r0 + slab)
                        x = _to_float(raw[r0 * row_in:r1 * row_in], p.src_type, (r1 - r0) * n_per_row)
                        q = _core.quantize_rows(int(p.dst_type), x.reshape(r1 - r0, n_per_row), n_threads,
                                                imatrix=w_m)
                        out.write_tensor_data(memoryview(q).cast("B"))
            bytes_in += raw.nbytes
            bytes_out += ot.nbytes
            n_elements += n
            if on_tensor:
                on_tensor(p, raw.nbytes, ot.nbytes)
        out.commit()
    return QuantizeResult(plans=plans, bytes_in=bytes_in, bytes_out=bytes_out, n_elements=n_elements,
                          seconds=time.perf_counter() - start, file_size_in=src_path.stat().st_size,
                          file_size_out=dst_path.stat().st_size,
                          notices=[p.notice for p in plans if p.notice])
