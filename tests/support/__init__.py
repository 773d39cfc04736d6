"""Helpers the tests share: plain functions and classes, one module per concern (fixtures live in
tests/conftest.py). Test modules import them as ``support.<module>``: pytest puts tests/ on
sys.path (the rootdir conftest, import mode "prepend"), and scripts/fuzz_gguf.py does the same."""
