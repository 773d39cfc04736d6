"""Generates gpu/kernel_sources.inc: the OpenCL C sources compiled into the core, and the block
layouts the kernels read, derived from the one definition in native/src/quant/blocks.h.

Run by setup.py before compiling (python native/src/gpu/embed_kernels.py OUT.inc). The output is
a C++ header of raw string literals, because C++17 has no #embed, xxd or `ld -b binary` are not on
every build machine (and not on Windows), and a header needs nothing but Python, which the build
already has. The .cl files stay plain OpenCL C that an editor or `clang -x cl` can check.

What it writes (namespace ei::cl::generated):
  kBlockPrelude     #defines for the block constants (QK4_0, QK_K, ...) and one OpenCL typedef per
                    block struct of blocks.h, field for field (uint16_t -> ushort, ...): kernels
                    index weights through these, so a layout cannot drift from the core's.
  kLayoutProbe      a kernel that writes sizeof and every field offset of each struct as the
                    device compiler laid them out (tests compare them with the host's).
  kKernelFiles      every native/src/gpu/kernels/*.cl, by file name.
  EI_BLOCK_LAYOUT(SIZE, FIELD)  an X-macro listing the structs and their fields in the probe's
                    order, so host code takes sizeof / offsetof of the real C++ structs for the
                    same list.

The parser is strict: a line inside a struct it does not understand is an error, never skipped,
so a change to blocks.h either reaches the devices or stops the build.
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
RAW_DELIM = "ei_cl"  # R"ei_cl( ... )ei_cl": the sources must not contain ')ei_cl"'

CONSTANT_RE = re.compile(r"^\s*constexpr\s+int\s+(\w+)\s*=\s*(\d+)\s*;")
STRUCT_OPEN_RE = re.compile(r"^\s*struct\s+(block_\w+)\s*\{")
FIELD_RE = re.compile(r"^\s*(\w+)\s+(\w+)\s*(?:\[([^\]]+)\])?\s*;\s*(?://.*)?$")


def parse_blocks(text: str) -> tuple[list[tuple[str, str]], list[tuple[str, list[tuple[str, str, str]]]]]:
    """(constants [(name, value)], structs [(name, [(cl_type, field, array_extent or '')])])."""
    constants: list[tuple[str, str]] = []
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
        m = STRUCT_OPEN_RE.match(line)
        if m:
            current = []
            structs.append((m.group(1), current))
    if current is not None:
        raise SystemExit(f"{BLOCKS_H}: unterminated struct {structs[-1][0]}")
    if not structs:
        raise SystemExit(f"{BLOCKS_H}: no block structs found")
    return constants, structs


def make_prelude(constants, structs) -> str:
    out = ["// Block layouts, generated from native/src/quant/blocks.h by",
           "// native/src/gpu/embed_kernels.py: do not edit (edit blocks.h).",
           "// fp16 fields are ushort bit patterns: read them with vload_half (no cl_khr_fp16 needed)."]
    out += [f"#define {name} {value}" for name, value in constants]
    for name, fields in structs:
        out.append("typedef struct {")
        for cl_type, field, extent in fields:
            out.append(f"    {cl_type} {field}{f'[{extent}]' if extent else ''};")
        out.append(f"}} {name};")
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


def raw_literal(text: str, what: str) -> str:
    if f"){RAW_DELIM}\"" in text:
        raise SystemExit(f"{what} contains the raw-string delimiter ){RAW_DELIM}\"")
    return f'R"{RAW_DELIM}({text}){RAW_DELIM}"'


def generate() -> str:
    constants, structs = parse_blocks(BLOCKS_H.read_text())
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
    lines += ["", "namespace ei::cl::generated {", "",
              f"constexpr const char* kBlockPrelude = {raw_literal(make_prelude(constants, structs), 'prelude')};",
              "", f"constexpr const char* kLayoutProbe = {raw_literal(make_probe(structs), 'probe')};", "",
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
