"""Split a GGUF file into parts the way llama.cpp's gguf-split does (tools/gguf-split): every part
a complete GGUF file named ``PREFIX-0000k-of-0000N.gguf``, all metadata in the first, each with
``split.no`` (u16, from 0), ``split.count`` (u16) and ``split.tensors.count`` (i32, all parts'
tensors); the tensors in file order, each in exactly one part, its bytes copied unchanged."""
from __future__ import annotations

from pathlib import Path

import gguf

SPLIT_NO, SPLIT_COUNT, SPLIT_TENSORS = "split.no", "split.count", "split.tensors.count"


def split_path(prefix: Path, index: int, count: int) -> Path:
    """llama.cpp's llama_split_path: part ``index`` (from 0) of ``count``."""
    return Path(f"{prefix}-{index + 1:05d}-of-{count:05d}.gguf")


def split_gguf(src: Path, prefix: Path, n_parts: int, *, empty_first: bool = False,
               overrides: dict[int, dict[str, int]] | None = None) -> list[Path]:
    """Write ``src`` as ``n_parts`` parts; ``empty_first`` leaves the first without tensors (as
    gguf-split's --no-tensor-first-split). ``overrides`` replaces split keys of a part (for tests
    of mismatched parts). Returns the parts' paths in order."""
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    tensors = list(reader.tensors)
    slots = n_parts - 1 if empty_first else n_parts
    per_part = -(-len(tensors) // slots)
    groups = [tensors[i * per_part:(i + 1) * per_part] for i in range(slots)]
    if empty_first:
        groups.insert(0, [])
    paths = []
    for index, group in enumerate(groups):
        path = split_path(prefix, index, n_parts)
        writer = gguf.GGUFWriter(path, arch)
        if index == 0:
            for field in reader.fields.values():
                if field.name.startswith("GGUF.") or field.name == "general.architecture":
                    continue
                sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
                writer.add_key_value(field.name, field.contents(), field.types[0], sub_type=sub_type)
        keys = {SPLIT_NO: index, SPLIT_COUNT: n_parts, SPLIT_TENSORS: len(tensors),
                **(overrides or {}).get(index, {})}
        writer.add_uint16(SPLIT_NO, keys[SPLIT_NO])
        writer.add_uint16(SPLIT_COUNT, keys[SPLIT_COUNT])
        writer.add_int32(SPLIT_TENSORS, keys[SPLIT_TENSORS])
        for t in group:
            writer.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        paths.append(path)
    return paths
