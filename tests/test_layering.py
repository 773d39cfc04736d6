"""Dependencies run one way: the command line is built on the library, never the reverse, so the
Python API, the server and the REPL work (and word their errors) without the CLI."""
from __future__ import annotations

import ast
from pathlib import Path

import edgeinfer

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
