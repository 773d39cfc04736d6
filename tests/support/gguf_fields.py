"""The byte location of every integer field of a GGUF file (counts, lengths, types, dims, offsets,
scalar values), found with gguf-py's reader, and reading or replacing one: what the reader's
malformed-file tests and the fuzz mutations (support/gguf_mutate.py) change."""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass

import gguf
import numpy as np


@dataclass
class FieldLoc:
    """One fixed-size integer field of a GGUF file: where it is and what it means."""
    label: str   # e.g. "kv 'test.arr_str' part 4", "tensor 'output.weight' dim 1"
    offset: int
    size: int    # 1, 4 or 8 bytes


def field_locations(path: os.PathLike | str, reader: gguf.GGUFReader | None = None) -> list[FieldLoc]:
    """Every integer field (counts, lengths, types, dims, offsets, scalar values) of a valid file,
    located with gguf.GGUFReader (pass one already open on `path` to skip a second parse; a
    large vocabulary takes seconds); string bytes are left out."""
    reader = reader or gguf.GGUFReader(str(path))
    locs: list[FieldLoc] = []

    def add_parts(label: str, offset: int, parts) -> None:
        for i, part in enumerate(parts):
            is_bytes = part.dtype == np.uint8 and part.size > 1  # a string's bytes
            if part.dtype.kind in "uib" and part.dtype.itemsize in (1, 4, 8) and not is_bytes:
                for k in range(part.size):  # dims arrive as one part of n_dims u64s
                    locs.append(FieldLoc(f"{label} part {i}.{k}", offset + k * part.itemsize, part.itemsize))
            offset += part.nbytes

    for name, field in reader.fields.items():
        add_parts(f"kv '{name}'", field.offset, field.parts)
    for t in reader.tensors:
        add_parts(f"tensor '{t.name}'", t.field.offset, t.field.parts)
    return locs


def with_u(data: bytes, offset: int, size: int, value: int) -> bytes:
    """A copy of `data` with the little-endian unsigned integer at `offset` replaced."""
    fmt = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}[size]
    return data[:offset] + struct.pack(fmt, value & ((1 << (8 * size)) - 1)) + data[offset + size:]


def read_u(data: bytes, offset: int, size: int) -> int:
    fmt = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}[size]
    return struct.unpack_from(fmt, data, offset)[0]
