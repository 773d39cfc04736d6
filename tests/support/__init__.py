"""Helpers the tests share: plain functions and classes, one module per concern (fixtures live in
tests/conftest.py). Test modules import them as ``support.<module>``: pyproject.toml puts tests/
on pytest's sys.path (``pythonpath``), and scripts/fuzz_gguf.py does the same."""
