"""The GGUF reader tests' sample: a small valid GGUF written with the `gguf` package's writer
(every value type, tensors of several types), and the values it should read back as."""
from __future__ import annotations

import os
from dataclasses import dataclass

import gguf
import numpy as np

from support.gguf_writing import write_out

VT = gguf.GGUFValueType
QT = gguf.GGMLQuantizationType

# key -> (value as written, value type, array element type). Every scalar type and the array
# element types models use; the invalid-UTF-8 string checks decoding with errors='replace'.
SAMPLE_KV: dict[str, tuple] = {
    "test.u8": (200, VT.UINT8, None),
    "test.i8": (-100, VT.INT8, None),
    "test.u16": (60000, VT.UINT16, None),
    "test.i16": (-30000, VT.INT16, None),
    "test.u32": (4_000_000_000, VT.UINT32, None),
    "test.i32": (-2_000_000_000, VT.INT32, None),
    "test.f32": (1.5, VT.FLOAT32, None),
    "test.bool_true": (True, VT.BOOL, None),
    "test.bool_false": (False, VT.BOOL, None),
    "test.str": ("héllo ✓ world", VT.STRING, None),
    "test.str_bad_utf8": (b"ab\xffcd", VT.STRING, None),
    "test.str_empty": ("", VT.STRING, None),
    "test.u64": (2**63 + 5, VT.UINT64, None),
    "test.u64_small": (12345, VT.UINT64, None),
    "test.i64": (-(2**62), VT.INT64, None),
    "test.f64": (3.141592653589793, VT.FLOAT64, None),
    "test.arr_str": (["<s>", "</s>", "", "▁hello", "日本"], VT.ARRAY, VT.STRING),
    "test.arr_i32": ([1, -2, 3, 2**31 - 1], VT.ARRAY, VT.INT32),
    "test.arr_u8": ([0, 1, 255], VT.ARRAY, VT.UINT8),
    "test.arr_f32": ([0.5, -1.25, 3.0], VT.ARRAY, VT.FLOAT32),
    "test.arr_bool": ([True, False, True], VT.ARRAY, VT.BOOL),
    "test.arr_u64": ([0, 2**64 - 1], VT.ARRAY, VT.UINT64),
}


def expected_value(value, vtype):
    """What _core.GgufFile.get should return for a value written as SAMPLE_KV describes."""
    if vtype == VT.FLOAT32:
        return float(np.float32(value))
    if vtype == VT.STRING and isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if vtype == VT.ARRAY:
        return [float(np.float32(v)) if isinstance(v, float) else v for v in value]
    return value


@dataclass
class SampleTensor:
    name: str
    type: int      # GGMLQuantizationType
    ne: list[int]  # ggml order: ne[0] is the row length
    data: bytes

    @property
    def nbytes(self) -> int:
        return len(self.data)


def _row_bytes(qtype: int, n: int) -> int:
    block, size = gguf.GGML_QUANT_SIZES[QT(qtype)]
    assert n % block == 0
    return n // block * size


def sample_tensors(seed: int = 0) -> list[SampleTensor]:
    """A few tensors of F32, F16, Q8_0 and Q4_1 with random bytes of the right sizes."""
    rng = np.random.default_rng(seed)
    specs = [
        ("tok_embd.weight", QT.Q8_0, [64, 3]),
        ("blk.0.attn_norm.weight", QT.F32, [64]),
        ("blk.0.ffn_up.weight", QT.Q4_1, [64, 2]),
        ("blk.0.f16.weight", QT.F16, [32, 2, 2]),
        ("output.weight", QT.F32, [16, 2, 2, 2]),
    ]
    out = []
    for name, qtype, ne in specs:
        n_rows = int(np.prod(ne[1:], dtype=np.int64))
        nbytes = _row_bytes(qtype, ne[0]) * n_rows
        out.append(SampleTensor(name, int(qtype), ne, rng.integers(0, 256, nbytes, dtype=np.uint8).tobytes()))
    return out


def write_gguf(path: os.PathLike | str, kv: dict[str, tuple] = SAMPLE_KV,
               tensors: list[SampleTensor] | None = None, alignment: int | None = None,
               arch: str = "test", endianess=gguf.GGUFEndian.LITTLE) -> None:
    """Writes a GGUF v3 file with `kv` (SAMPLE_KV layout) and `tensors` using gguf.GGUFWriter."""
    tensors = sample_tensors() if tensors is None else tensors
    w = gguf.GGUFWriter(str(path), arch, endianess=endianess)
    if alignment is not None:
        w.add_custom_alignment(alignment)
    for key, (value, vtype, sub) in kv.items():
        w.add_key_value(key, value, vtype, sub_type=sub)
    for t in tensors:
        # The writer takes the numpy shape (reverse of ne) of the *bytes* for quantized types.
        byte_shape = list(reversed(t.ne[1:])) + [len(t.data) // max(1, int(np.prod(t.ne[1:])))]
        raw = np.frombuffer(t.data, dtype=np.uint8).reshape(byte_shape)
        w.add_tensor(t.name, raw, raw_dtype=QT(t.type))
    write_out(w)
