#!/usr/bin/env python3
"""Writes a copy of a GGUF file with every tensor dequantized to F32 (or 2-D tensors to F16).

This is how the reference data's "F32/F16 dequantized" files were made (../shared/fixtures/
REFERENCE.md §8): gguf-py's dequantization, which is bit-identical to llama.cpp's, plus GGUFWriter
with all metadata copied verbatim except general.file_type. The fp32 oracle tests use it."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter, GGMLQuantizationType
from gguf.quants import dequantize


def copy_metadata(reader: GGUFReader, writer: GGUFWriter, file_type: int) -> None:
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        if field.name == "general.file_type":
            writer.add_uint32(field.name, file_type)
            continue
        vtype = field.types[0]
        if vtype == GGUFValueType.ARRAY:
            sub = field.types[1]
            if sub == GGUFValueType.STRING:
                value = [bytes(field.parts[i]).decode("utf-8", errors="surrogateescape") for i in field.data]
            else:
                value = [field.parts[i].tolist()[0] for i in field.data]
            writer.add_key_value(field.name, value, vtype, sub_type=sub)
        elif vtype == GGUFValueType.STRING:
            writer.add_key_value(field.name, bytes(field.parts[-1]).decode("utf-8", errors="surrogateescape"), vtype)
        else:
            writer.add_key_value(field.name, field.parts[-1].tolist()[0], vtype)


def dequantize_file(src: Path, dst: Path, outtype: str = "f32") -> None:
    reader = GGUFReader(src)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    tmp = dst.with_name(dst.name + ".tmp")
    writer = GGUFWriter(tmp, arch)
    copy_metadata(reader, writer, 0 if outtype == "f32" else 1)
    for t in reader.tensors:
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))  # numpy order: rows first
        data = dequantize(t.data, GGMLQuantizationType(t.tensor_type)).reshape(shape).astype(np.float32)
        if outtype == "f16" and data.ndim == 2:
            data = data.astype(np.float16)
        writer.add_tensor(t.name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, dst)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--outtype", choices=["f32", "f16"], default="f32")
    args = ap.parse_args()
    dequantize_file(args.src, args.dst, args.outtype)
    return 0


if __name__ == "__main__":
    sys.exit(main())
