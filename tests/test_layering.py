"""Dependencies run one way: the command line is built on the library, never the reverse, so the
Python API, the server and the REPL work (and word their errors) without the CLI; and the product
module carries no test-only entry points, which live in edgeinfer._testing."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import edgeinfer
from edgeinfer import _core, _testing

PACKAGE = Path(edgeinfer.__file__).parent


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, at the top or inside a function (a deferred import is still one)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_the_library_never_imports_the_command_line():
    library = [p for p in PACKAGE.rglob("*.py")
               if p.relative_to(PACKAGE).parts[0] != "cli" and p.name != "__main__.py"]
    assert len(library) > 20
    offenders = {str(p.relative_to(PACKAGE)): sorted(m for m in imported_modules(p)
                                                     if m == "edgeinfer.cli" or m.startswith("edgeinfer.cli."))
                 for p in library}
    assert {path: found for path, found in offenders.items() if found} == {}


# What only tests call: one kernel, one float op, one attention or one device op per call.
TEST_ENTRY_POINTS = ["vec_dot_type", "quantize", "vec_dot", "vec_dot_raw", "gemm", "attn_f16_row", "attn_f16_rows", "attention_f16",
                     "swiglu", "geglu", "rope_rotate", "rope_rotate_neox", "kv_cache_attention", "attention_kv",
                     "attention_kv_seconds", "OpenCLDevice", "opencl_host_block_layouts", "opencl_block_prelude"]


@pytest.mark.parametrize("name", TEST_ENTRY_POINTS)
def test_test_entry_points_live_in_the_testing_module_only(name):
    assert hasattr(_testing, name)
    assert not hasattr(_core, name)


def test_the_package_never_imports_the_testing_module():
    users = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
             if any(m.startswith("edgeinfer._testing") for m in imported_modules(p))]
    assert users == []


def test_the_testing_module_raises_the_cores_exception_classes():
    with pytest.raises(_core.EdgeInferError, match="unknown ggml type id 99"):
        _testing.vec_dot(99, np.zeros(0, np.uint8), np.ones(32, np.float32))
    with pytest.raises(_core.EdgeInferError, match="unknown instruction set 'avx9'"):
        _testing.swiglu(np.ones(4, np.float32), np.ones(4, np.float32), isa="avx9")
