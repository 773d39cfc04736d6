"""A Hugging Face checkpoint folder, read lazily: config.json, generation_config.json and the
weights of every ``*.safetensors`` shard (``model.safetensors.index.json`` names them when
sharded).

The safetensors files are read through their documented layout (an 8-byte little-endian header
length, a JSON header of name -> dtype, shape, data offsets, then the raw data) and mapped with
numpy, one tensor at a time. The ``safetensors`` package's numpy reader cannot return bfloat16,
the type most checkpoints are published in, and its torch reader would make torch a runtime
dependency; the format itself is ten lines, so nothing is lost by reading it here.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from edgeinfer.errors import ModelFormatError

# safetensors dtype -> numpy dtype of the stored values (BF16 is read as its raw 16 bits).
_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64,
           "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
_MAX_HEADER = 100 << 20


@dataclass
class LazyTensor:
    """One tensor of a shard: where its bytes are, not the bytes."""
    name: str
    dtype: str               # safetensors dtype name: "F32", "BF16", ...
    shape: tuple[int, ...]   # numpy order (rows first)
    path: Path
    offset: int              # absolute byte offset of the data in the file
    nbytes: int

    def load(self) -> np.ndarray:
        """The values as float32 (a new array; the file is mapped only while reading)."""
        if self.dtype not in ("F32", "F16", "BF16", "F64"):
            raise ModelFormatError(f"{self.path.name}: tensor {self.name} has type {self.dtype}, "
                                   "which is not a floating-point weight")
        raw = np.memmap(self.path, dtype=_DTYPES[self.dtype], mode="r", offset=self.offset,
                        shape=self.shape)
        if self.dtype == "BF16":
            return (raw.astype(np.uint32) << 16).view(np.float32)
        return np.array(raw, dtype=np.float32)


def _read_header(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ModelFormatError(f"{path}: not a safetensors file (too short)")
        (n,) = struct.unpack("<Q", head)
        if n > _MAX_HEADER:
            raise ModelFormatError(f"{path}: safetensors header of {n} bytes is implausible")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelFormatError(f"{path}: unreadable safetensors header ({exc})") from None
    if not isinstance(header, dict):
        raise ModelFormatError(f"{path}: safetensors header is not an object")
    return {"data_start": 8 + n, "entries": header, "size": path.stat().st_size}


def _shard_tensors(path: Path) -> Iterator[LazyTensor]:
    header = _read_header(path)
    start, size = header["data_start"], header["size"]
    for name, entry in header["entries"].items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = entry["dtype"], tuple(int(d) for d in entry["shape"]), entry["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise ModelFormatError(f"{path}: bad header entry for tensor {name!r}") from None
        if dtype not in _DTYPES:
            raise ModelFormatError(f"{path}: tensor {name} has unknown type {dtype}")
        expected = int(np.prod(shape, dtype=np.int64)) * np.dtype(_DTYPES[dtype]).itemsize
        if not (0 <= begin <= end and end - begin == expected and start + end <= size):
            raise ModelFormatError(f"{path}: tensor {name} has data offsets outside the file or of the wrong size")
        yield LazyTensor(name, dtype, shape, path, start + begin, end - begin)


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of one small safetensors file as float32 (a sentence-transformers module's)."""
    return {t.name: t.load() for t in _shard_tensors(path)}


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ModelFormatError(f"{path}: invalid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ModelFormatError(f"{path}: expected a JSON object")
    return value


class Checkpoint:
    """A checkpoint folder. `config` is config.json; `generation_config` the optional
    generation_config.json; `tensors` every weight by its Hugging Face name, in file order."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise ModelFormatError(f"{self.folder}: not a folder (expected a Hugging Face checkpoint)")
        config_path = self.folder / "config.json"
        if not config_path.is_file():
            raise ModelFormatError(f"{self.folder}: no config.json (is this a Hugging Face checkpoint?)")
        self.config = _read_json(config_path)
        gen = self.folder / "generation_config.json"
        self.generation_config = _read_json(gen) if gen.is_file() else {}
        self.tensors: dict[str, LazyTensor] = {}
        for shard in self._shards():
            for t in _shard_tensors(shard):
                if t.name in self.tensors:
                    raise ModelFormatError(f"{shard}: tensor {t.name} is also in {self.tensors[t.name].path.name}")
                self.tensors[t.name] = t

    def _shards(self) -> list[Path]:
        index = self.folder / "model.safetensors.index.json"
        if index.is_file():
            weight_map = _read_json(index).get("weight_map")
            if not isinstance(weight_map, dict):
                raise ModelFormatError(f"{index}: no weight_map")
            names = sorted(set(weight_map.values()))
            missing = [n for n in names if not (self.folder / n).is_file()]
            if missing:
                raise ModelFormatError(f"{index}: shard {missing[0]} is missing")
            return [self.folder / n for n in names]
        shards = sorted(self.folder.glob("*.safetensors"))
        if not shards:
            other = sorted(p.name for p in self.folder.glob("*.bin")) + sorted(p.name for p in self.folder.glob("*.pt*"))
            hint = f" (found {other[0]}: PyTorch pickles are not read; save the model with safetensors)" if other else ""
            raise ModelFormatError(f"{self.folder}: no .safetensors weights{hint}")
        return shards

    @property
    def architecture(self) -> str:
        archs = self.config.get("architectures") or []
        if not archs or not isinstance(archs[0], str):
            raise ModelFormatError(f"{self.folder}/config.json: no 'architectures' entry")
        return archs[0]
