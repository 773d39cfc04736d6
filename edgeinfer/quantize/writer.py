"""GGUF output for `edgeinfer quantize`: the input's metadata copied byte for byte (only
general.file_type and general.quantization_version set), new tensor infos, then the tensor data
streamed in, written to a temporary file that is renamed over the output only when complete
(edgeinfer.output_file).

The metadata is copied as raw entries rather than re-encoded, so every value keeps its exact GGUF
type (uint32 vs int32, array element types) and large vocabularies cost one scan, not a parse.
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from edgeinfer.errors import ModelFormatError
from edgeinfer.output_file import PartialFile

GGUF_MAGIC = b"GGUF"
# GGUF value type id -> size in bytes of a scalar (strings and arrays are variable).
_SCALAR_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY, _UINT32 = 8, 9, 4


@dataclass
class RawKV:
    key: str
    raw: bytes   # the whole entry as stored: key, value type, value


def read_raw_metadata(path: str | Path) -> tuple[int, list[RawKV]]:
    """(version, metadata entries in file order) of a GGUF file. The core's reader has already
    validated the file; this only finds where each entry starts and ends."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        if len(mm) < 24 or mm[:4] != GGUF_MAGIC:
            raise ModelFormatError(f"{path}: not a GGUF file")
        version, _n_tensors, n_kv = struct.unpack_from("<IQQ", mm, 4)
        if version < 2:
            raise ModelFormatError(f"{path}: GGUF version {version} is not supported")
        mv = memoryview(mm)   # only the metadata at the front is read
        try:
            return version, _scan_entries(path, mv, 24, n_kv)
        finally:
            mv.release()


def _scan_entries(path: str | Path, mv: memoryview, pos: int, n_kv: int) -> list[RawKV]:

    def skip_value(vtype: int, at: int) -> int:
        if vtype in _SCALAR_SIZE:
            return at + _SCALAR_SIZE[vtype]
        if vtype == _STRING:
            (n,) = struct.unpack_from("<Q", mv, at)
            return at + 8 + n
        if vtype == _ARRAY:
            etype, count = struct.unpack_from("<IQ", mv, at)
            at += 12
            if etype in _SCALAR_SIZE:
                return at + count * _SCALAR_SIZE[etype]
            for _ in range(count):
                at = skip_value(etype, at)
            return at
        raise ModelFormatError(f"{path}: unknown metadata value type {vtype}")

    entries = []
    for _ in range(n_kv):
        start = pos
        (klen,) = struct.unpack_from("<Q", mv, pos)
        key = bytes(mv[pos + 8:pos + 8 + klen]).decode("utf-8", errors="replace")
        pos += 8 + klen
        (vtype,) = struct.unpack_from("<I", mv, pos)
        pos = skip_value(vtype, pos + 4)
        entries.append(RawKV(key, bytes(mv[start:pos])))
    return entries


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def uint32_kv(key: str, value: int) -> RawKV:
    return RawKV(key, _string(key) + struct.pack("<II", _UINT32, value))


def string_kv(key: str, value: str) -> RawKV:
    return RawKV(key, _string(key) + struct.pack("<I", _STRING) + _string(value))


def string_array_kv(key: str, values: list[str]) -> RawKV:
    return RawKV(key, _string(key) + struct.pack("<IIQ", _ARRAY, _STRING, len(values)) +
                 b"".join(_string(v) for v in values))


def set_kv(entries: list[RawKV], new: RawKV) -> list[RawKV]:
    """`entries` without any entry of `new`'s key, then `new` at the end (ggml's gguf_set_* order,
    so the header comes out as llama-quantize writes it)."""
    return [e for e in entries if e.key != new.key] + [new]


def alignment_of(entries: list[RawKV]) -> int:
    for e in entries:
        if e.key == "general.alignment":
            return struct.unpack_from("<I", e.raw, len(e.raw) - 4)[0] or 32
    return 32


@dataclass
class OutTensor:
    name: str
    shape: list[int]   # ne order
    type: int
    nbytes: int


class GGUFOutput:
    """Writes header, metadata and tensor infos at once, then the tensors' data in the same order
    through `write_tensor_data` (each call appends bytes of the current tensor). `commit()`
    renames the temporary file over `path`; `abort()` (or leaving the `with` block by an
    exception, Ctrl-C included) deletes it. The output name never holds a partial file."""

    def __init__(self, path: str | Path, metadata: list[RawKV], tensors: list[OutTensor]):
        self._partial = PartialFile(path)
        self.path = self._partial.path
        self.align = alignment_of(metadata)
        self.tensors = tensors
        self._file: BinaryIO | None = None
        try:
            with self._partial.errors():
                self._file = open(self._partial.tmp_path, "wb")
                self._write_head(metadata)
        except BaseException:
            self.abort()
            raise
        self._index = 0          # tensor being written
        self._written = 0        # bytes of it so far

    def _pad(self, n: int) -> int:
        return (self.align - n % self.align) % self.align

    def _write_head(self, metadata: list[RawKV]) -> None:
        f = self._file
        f.write(GGUF_MAGIC + struct.pack("<IQQ", 3, len(self.tensors), len(metadata)))
        for e in metadata:
            f.write(e.raw)
        offset = 0
        for t in self.tensors:
            f.write(_string(t.name) + struct.pack("<I", len(t.shape)))
            f.write(struct.pack(f"<{len(t.shape)}Q", *t.shape))
            f.write(struct.pack("<IQ", t.type, offset))
            offset += t.nbytes + self._pad(t.nbytes)
        f.write(b"\0" * self._pad(f.tell()))

    def write_tensor_data(self, data: bytes | memoryview) -> None:
        t = self.tensors[self._index]
        n = len(memoryview(data).cast("B"))
        if self._written + n > t.nbytes:
            raise ValueError(f"{t.name}: more than {t.nbytes} bytes written")
        with self._partial.errors():
            self._file.write(data)
            self._written += n
            if self._written == t.nbytes:
                self._file.write(b"\0" * self._pad(t.nbytes))
                self._index += 1
                self._written = 0

    def commit(self) -> None:
        if self._index != len(self.tensors):
            raise ValueError(f"only {self._index} of {len(self.tensors)} tensors were written")
        with self._partial.errors():
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
        self._file = None
        self._partial.publish()

    def abort(self) -> None:
        try:
            if self._file is not None:
                self._file.close()
        except OSError:
            pass  # the data is thrown away: a failed flush must not hide the error that got us here
        finally:
            self._file = None
            self._partial.discard()

    def __enter__(self) -> "GGUFOutput":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None or self._file is not None:
            self.abort()
