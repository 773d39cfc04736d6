"""Generates gpu/kernel_sources.inc: the OpenCL C sources compiled into the core, and the block
layouts and decoding tables the kernels read, derived from the one definition in
native/src/quant/blocks.h (and the i-quants' grids in quant/iq_grids.h, iq1_grids.h).

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
  kKernelFiles      every native/src/gpu/kernels/*.cl, by file name, and one generated file per
                    grid header (GRID_HEADERS: iq_grids.cl, iq1_grids.cl): the i-quants' lattice
                    tables as __constant arrays. Too large for every program, they are files a
                    program lists only when its kernels index them (gpu/ops.cpp source_of).
  kGridFiles        the names of those generated files (the table probe compiles them all).
  EI_BLOCK_LAYOUT(SIZE, FIELD)  an X-macro listing the structs and their fields in the probe's
                    order, so host code takes sizeof / offsetof of the real C++ structs for the
                    same list.
  EI_BLOCK_TABLES(TABLE)  the same for the tables (blocks.h's, then the grids'), in kTableProbe's
                    order.

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
# The lattice grids of the i-quants: (header, the generated kernel file that carries its tables).
# Multi-line tables of 32- and 64-bit points, parsed by parse_grids.
GRID_HEADERS = ((HERE.parent / "quant" / "iq_grids.h", "iq_grids.cl"),
                (HERE.parent / "quant" / "iq1_grids.h", "iq1_grids.cl"))

# C++ field types of blocks.h -> OpenCL C types of the same size and signedness.
CL_TYPES = {
    "uint8_t": "uchar", "int8_t": "char", "uint16_t": "ushort", "int16_t": "short",
    "uint32_t": "uint", "int32_t": "int", "uint64_t": "ulong", "float": "float",
}
# The element types a table may have: integers whose every value an OpenCL int holds.
TABLE_TYPES = ("int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t")
# The element types of a grid: whole points, read back by the probe as their 64-bit pattern.
GRID_TYPES = ("uint32_t", "uint64_t")
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


GRID_RE = re.compile(r"^\s*inline\s+constexpr\s+(\w+)\s+(\w+)\s*\[\s*(\w+)\s*\]\s*=\s*\{([^}]*)\}\s*;",
                     re.MULTILINE)
GRID_START_RE = re.compile(r"^\s*inline\s+constexpr\s+\w+\s+\w+\s*\[", re.MULTILINE)


GRID_FLOAT_RE = re.compile(r"^\s*constexpr\s+float\s+(\w+)\s*=\s*([0-9.]+f)\s*;", re.MULTILINE)


def parse_grids(path: Path) -> tuple[list[tuple[str, str, list[int]]], list[tuple[str, str]]]:
    """([(name, cl_type, values)], [(name, float literal)]): every array of a grid header (other
    declarations, such as the sign tables derived by rule, are not tables) and its float constants
    (kIq1Delta). Strict: an array that does not parse stops the build."""
    text = path.read_text()
    constants = dict(re.findall(r"^\s*constexpr\s+int\s+(\w+)\s*=\s*(\d+)\s*;", text, re.MULTILINE))
    grids = []
    for m in GRID_RE.finditer(text):
        c_type, name, extent, body = m.groups()
        lineno = text.count("\n", 0, m.start()) + 1
        if c_type not in GRID_TYPES:
            raise SystemExit(f"{path}:{lineno}: grid {name}: the type {c_type!r} is not one of {', '.join(GRID_TYPES)}")
        values = [int(v, 0) for v in body.split(",") if v.strip()]
        size = int(constants.get(extent, extent))
        if len(values) != size:
            raise SystemExit(f"{path}:{lineno}: grid {name} has {len(values)} values for an extent of {size}")
        grids.append((name, CL_TYPES[c_type], values))
    if len(grids) != len(GRID_START_RE.findall(text)):
        raise SystemExit(f"{path}: an array declaration is not a one-block table of integers")
    return grids, GRID_FLOAT_RE.findall(text)


def make_grid_file(path: Path, grids, floats) -> str:
    out = [f"// The lattice grids of native/src/quant/{path.name}, generated by native/src/gpu/embed_kernels.py:",
           "// do not edit (edit the header). A point's element j is its byte j (little-endian)."]
    out += [f"#define {name} {value}" for name, value in floats]
    for name, cl_type, values in grids:
        suffix, width = ("UL", 16) if cl_type == "ulong" else ("U", 8)
        out.append(f"__constant {cl_type} {name}[{len(values)}] = {{")
        for k in range(0, len(values), 4):
            out.append("    " + ", ".join(f"0x{v:0{width}x}{suffix}" for v in values[k:k + 4]) + ",")
        out.append("};")
    return "\n".join(out) + "\n"


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
    out = ["__kernel void ei_block_tables(__global long* out) {", "    int i = 0;"]
    for name, _, values in tables:
        out.append(f"    for (int j = 0; j < {len(values)}; ++j) out[i++] = (long){name}[j];")
    out.append("}")
    return "\n".join(out) + "\n"


RAW_PIECE = 8000  # characters a literal piece may hold: MSVC refuses pieces over 16 KB (C2026)


def raw_literal(text: str, what: str) -> str:
    """text as adjacent raw string literals (which C++ joins), each under RAW_PIECE, split at lines."""
    if f"){RAW_DELIM}\"" in text:
        raise SystemExit(f"{what} contains the raw-string delimiter ){RAW_DELIM}\"")
    pieces, start = [], 0
    while len(text) - start > RAW_PIECE:
        cut = text.rfind("\n", start, start + RAW_PIECE) + 1
        if cut <= start:
            raise SystemExit(f"{what} has a line longer than {RAW_PIECE} characters")
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return "\n    ".join(f'R"{RAW_DELIM}({p}){RAW_DELIM}"' for p in pieces)


def generate() -> str:
    constants, structs, tables = parse_blocks(BLOCKS_H.read_text())
    files = [(f.name, f.read_text(), str(f)) for f in sorted(KERNELS_DIR.glob("*.cl"))]
    grid_files, block_tables = [], list(tables)
    for header, name in GRID_HEADERS:
        if (KERNELS_DIR / name).exists():
            raise SystemExit(f"{KERNELS_DIR / name}: the name of a generated grid file")
        grids, floats = parse_grids(header)
        tables += grids
        grid_files.append(name)
        files.append((name, make_grid_file(header, grids, floats), str(header)))
    lines = [
        "// Generated by native/src/gpu/embed_kernels.py from native/src/quant/blocks.h, the grid",
        "// headers (iq_grids.h, iq1_grids.h) and native/src/gpu/kernels/*.cl: do not edit.",
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
    prelude = make_prelude(constants, structs, block_tables)
    lines += ["", "namespace ei::cl::generated {", "",
              f"constexpr const char* kBlockPrelude = {raw_literal(prelude, 'prelude')};",
              "", f"constexpr const char* kLayoutProbe = {raw_literal(make_probe(structs), 'probe')};", "",
              f"constexpr const char* kTableProbe = {raw_literal(make_table_probe(tables), 'table probe')};", "",
              "struct EmbeddedFile {", "    const char* name;", "    const char* text;", "};", "",
              "constexpr EmbeddedFile kKernelFiles[] = {"]
    for name, text, what in files:
        lines.append(f'    {{"{name}", {raw_literal(text, what)}}},')
    if not files:
        lines.append('    {"", ""},')
    lines += ["};", "", "constexpr const char* kGridFiles[] = {" + ", ".join(f'"{g}"' for g in grid_files) + "};",
              "", "}  // namespace ei::cl::generated", ""]
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
