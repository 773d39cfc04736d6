"""Generates gpu/kernel_sources.inc: the OpenCL C sources compiled into the core, and the block
layouts and decoding tables the kernels read, derived from the one definition in
native/src/quant/blocks.h.

Run by setup.py before compiling (python native/src/gpu/embed_kernels.py OUT.inc). The output is
a C++ header of raw string literals, because C++17 has no #embed, xxd or `ld -b binary` are not on
every build machine (and not on Windows), and a header needs nothing but Python, which the build
already has. The .cl files stay plain OpenCL C that an editor or `clang -x cl` can check.

What it writes (namespace ei::cl::generated):
  kBlockPrelude     #defines for the block constants (QK4_0, QK_K, ...), one OpenCL typedef per
                    block struct of blocks.h, field for field (uint16_t -> ushort, ...), and one
                    __constant array per value table (kIq4nlValues, ...): kernels index weights
                    and decode them through these, so neither can drift from the core's.
  kLayoutProbe      a kernel that writes sizeof and every field offset of each struct as the
                    device compiler laid them out (tests compare them with the host's).
  kTableProbe       a kernel that writes every value of each table as the device reads it.
  kKernelFiles      every native/src/gpu/kernels/*.cl, by file name.
  EI_BLOCK_LAYOUT(SIZE, FIELD)  an X-macro listing the structs and their fields in the probe's
                    order, so host code takes sizeof / offsetof of the real C++ structs for the
                    same list.
  EI_BLOCK_TABLES(TABLE)  the same for the tables, in kTableProbe's order.

The parser is strict: a line inside a struct it does not understand is an error, never skipped,
and so is a constexpr line outside the structs that is neither a constant nor a table, so a
change to blocks.h either reaches the devices or stops the build.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BLOCKS_H = HERE.parent / "quant" / "blocks.h"
KERNELS_DIR = HERE / "kernels"

# C++ field types of blocks.h -> OpenCL C types of the same size and signedness.
CL_TYPES = {
    "uint8_t": "uchar", "int8_t": "char", "uint16_t": "ushort", "int16_t": "short",
    "uint32_t": "uint", "int32_t": "int", "float": "float",
}
# The element types a table may have: integers whose every value an OpenCL int holds.
TABLE_TYPES = ("int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t")
RAW_DELIM = "ei_cl"  # R"ei_cl( ... )ei_cl": the sources must not contain ')ei_cl"'

CONSTANT_RE = re.compile(r"^\s*constexpr\s+int\s+(\w+)\s*=\s*(\d+)\s*;")
# A value table on one line: inline constexpr int8_t name[16] = {v, v, ...};
TABLE_RE = re.compile(r"^\s*inline\s+constexpr\s+(\w+)\s+(\w+)\s*\[\s*(\w+)\s*\]\s*=\s*\{([^}]*)\}\s*;")
DECLARATION_RE = re.compile(r"^\s*(?:inline\s+)?constexpr\b")
STRUCT_OPEN_RE = re.compile(r"^\s*struct\s+(block_\w+)\s*\{")
FIELD_RE = re.compile(r"^\s*(\w+)\s+(\w+)\s*(?:\[([^\]]+)\])?\s*;\s*(?://.*)?$")


def parse_blocks(text: str):
    """(constants [(name, value)], structs [(name, [(cl_type, field, array_extent or '')])],
    tables [(name, cl_type, [int values])])."""
    constants: list[tuple[str, str]] = []
    tables: list[tuple[str, str, list[int]]] = []
    structs: list[tuple[str, list[tuple[str, str, str]]]] = []
    current: list[tuple[str, str, str]] | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if current is not None:
            stripped = line.strip()
            if stripped == "};":
                current = None
                continue
            if not stripped or stripped.startswith("//"):
                continue
            m = FIELD_RE.match(line)
            if not m or m.group(1) not in CL_TYPES:
                raise SystemExit(f"{BLOCKS_H}:{lineno}: cannot translate this field to OpenCL C: {stripped!r}")
            current.append((CL_TYPES[m.group(1)], m.group(2), (m.group(3) or "").strip()))
            continue
        m = CONSTANT_RE.match(line)
        if m:
            constants.append((m.group(1), m.group(2)))
            continue
        m = TABLE_RE.match(line)
        if m:
            tables.append(parse_table(m, dict(constants), lineno))
            continue
        if DECLARATION_RE.match(line):
            raise SystemExit(f"{BLOCKS_H}:{lineno}: neither a constant nor a one-line table: {line.strip()!r}")
        m = STRUCT_OPEN_RE.match(line)
        if m:
            current = []
            structs.append((m.group(1), current))
    if current is not None:
        raise SystemExit(f"{BLOCKS_H}: unterminated struct {structs[-1][0]}")
    if not structs:
        raise SystemExit(f"{BLOCKS_H}: no block structs found")
    return constants, structs, tables


def parse_table(m: re.Match, constants: dict[str, str], lineno: int) -> tuple[str, str, list[int]]:
    """(name, cl_type, values) of a TABLE_RE match; its extent must be the number of values."""
    c_type, name, extent, body = m.groups()
    if c_type not in TABLE_TYPES:  # the probe reads every value back as an int
        raise SystemExit(f"{BLOCKS_H}:{lineno}: table {name}: the type {c_type!r} is not one of "
                         f"{', '.join(TABLE_TYPES)}")
    try:
        values = [int(v, 0) for v in body.split(",") if v.strip()]
        size = int(constants.get(extent, extent))
    except ValueError:
        raise SystemExit(f"{BLOCKS_H}:{lineno}: table {name}: the values and the extent must be integers "
                         "(the extent may be a constant defined above)")
    if len(values) != size:
        raise SystemExit(f"{BLOCKS_H}:{lineno}: table {name} has {len(values)} values for an extent of {size}")
    return name, CL_TYPES[c_type], values


def make_prelude(constants, structs, tables) -> str:
    out = ["// Block layouts and tables, generated from native/src/quant/blocks.h by",
           "// native/src/gpu/embed_kernels.py: do not edit (edit blocks.h).",
           "// fp16 fields are ushort bit patterns: read them with vload_half (no cl_khr_fp16 needed)."]
    out += [f"#define {name} {value}" for name, value in constants]
    for name, fields in structs:
        out.append("typedef struct {")
        for cl_type, field, extent in fields:
            out.append(f"    {cl_type} {field}{f'[{extent}]' if extent else ''};")
        out.append(f"}} {name};")
    for name, cl_type, values in tables:
        out.append(f"__constant {cl_type} {name}[{len(values)}] = {{{', '.join(map(str, values))}}};")
    return "\n".join(out) + "\n"


def make_probe(structs) -> str:
    """A kernel writing, per struct, sizeof then each field's offset, in EI_BLOCK_LAYOUT order."""
    out = ["__kernel void ei_block_layouts(__global ulong* out) {", "    int i = 0;"]
    for name, fields in structs:
        out.append("    {")
        out.append(f"        {name} b;")
        out.append(f"        out[i++] = sizeof({name});")
        for _, field, _ in fields:
            out.append(f"        out[i++] = (ulong)((__private char*)&b.{field} - (__private char*)&b);")
        out.append("    }")
    out.append("}")
    return "\n".join(out) + "\n"


def make_table_probe(tables) -> str:
    """A kernel writing every value of each table, table after table, in EI_BLOCK_TABLES order."""
    out = ["__kernel void ei_block_tables(__global int* out) {", "    int i = 0;"]
    for name, _, values in tables:
        out.append(f"    for (int j = 0; j < {len(values)}; ++j) out[i++] = {name}[j];")
    out.append("}")
    return "\n".join(out) + "\n"


def raw_literal(text: str, what: str) -> str:
    if f"){RAW_DELIM}\"" in text:
        raise SystemExit(f"{what} contains the raw-string delimiter ){RAW_DELIM}\"")
    return f'R"{RAW_DELIM}({text}){RAW_DELIM}"'


def generate() -> str:
    constants, structs, tables = parse_blocks(BLOCKS_H.read_text())
    files = sorted(KERNELS_DIR.glob("*.cl"))
    lines = [
        "// Generated by native/src/gpu/embed_kernels.py from native/src/quant/blocks.h and",
        "// native/src/gpu/kernels/*.cl: do not edit.",
        "#pragma once",
        "",
        "// SIZE(struct) then FIELD(struct, field) for each of its fields, for every block struct,",
        "// in the order the layout probe writes them.",
        "#define EI_BLOCK_LAYOUT(SIZE, FIELD) \\",
    ]
    for name, fields in structs:
        lines.append(f"    SIZE({name}) \\")
        for _, field, _ in fields:
            lines.append(f"    FIELD({name}, {field}) \\")
    lines += ["", "// TABLE(name) for every value table, in the order the table probe writes them.",
              "#define EI_BLOCK_TABLES(TABLE) \\"]
    lines += [f"    TABLE({name}) \\" for name, _, _ in tables]
    prelude = make_prelude(constants, structs, tables)
    lines += ["", "namespace ei::cl::generated {", "",
              f"constexpr const char* kBlockPrelude = {raw_literal(prelude, 'prelude')};",
              "", f"constexpr const char* kLayoutProbe = {raw_literal(make_probe(structs), 'probe')};", "",
              f"constexpr const char* kTableProbe = {raw_literal(make_table_probe(tables), 'table probe')};", "",
              "struct EmbeddedFile {", "    const char* name;", "    const char* text;", "};", "",
              "constexpr EmbeddedFile kKernelFiles[] = {"]
    for f in files:
        lines.append(f'    {{"{f.name}", {raw_literal(f.read_text(), str(f))}}},')
    if not files:
        lines.append('    {"", ""},')
    lines += ["};", "", "}  // namespace ei::cl::generated", ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: embed_kernels.py OUT.inc", file=sys.stderr)
        return 2
    out = Path(argv[1])
    text = generate()
    # Rewrite only on change, so an unchanged build stays up to date (and ccache hits).
    if not out.exists() or out.read_text() != text:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
