"""Pulling GGUF models from the Hugging Face Hub by name (edgeinfer/hub.py), against a local fake
hub (support/fake_hub.py) that huggingface_hub is pointed at; no network.

Checks: the name syntax; the file a quant tag picks (default Q4_K_M, case-insensitive, mmproj never,
a clear list of tags when none matches); a split model pulled as all its parts, loading with the
whole file's logits; the pulled file loads; a connection dropped mid-file resumes with a Range
request and gives the same bytes; a pull killed mid-file leaves a partial the next pull resumes
from (and huggingface_hub finds the file after); a partial with wrong bytes fails the sha256 check
and is deleted; a file whose bytes do not match the Hub's sha256 is refused and deleted; a second pull neither downloads
nor re-hashes; offline mode resolves from the cache with the hub stopped; 404 / 401 / 403 and
offline-not-cached are one-line errors; the token is sent; `resolve_model` and `edgeinfer pull`
take these names.
"""
from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from contextlib import contextmanager

import numpy as np
import pytest
from huggingface_hub import constants, hf_hub_download

import edgeinfer.hub as hub
from edgeinfer import Model
from edgeinfer.hub import HubError, parse_hub_name, pull_hub_model
from edgeinfer.pull import PullReporter, resolve_model
from edgeinfer.hub_download import partial_path
from support.cli import assert_clean_error, child_env, run_cli
from support.fake_hub import FakeHub, FakeHubServer
from support.gguf_split import split_gguf
from support.tiny_llama import TinyConfig, write_tiny_llama

REPO = "tester/Tiny-GGUF"


@pytest.fixture(scope="module")
def gguf_bytes(tmp_path_factory) -> dict[str, bytes]:
    """Real tiny GGUF files under the names a quantized repo uses (each different)."""
    folder = tmp_path_factory.mktemp("gguf")
    names = ["Tiny-Q4_K_M.gguf", "Tiny-Q8_0.gguf", "Tiny-mmproj-f16.gguf", "Tiny-Q2_K.gguf"]
    files = {}
    for seed, name in enumerate(names):
        write_tiny_llama(folder / name, TinyConfig(), seed=seed)
        files[name] = (folder / name).read_bytes()
    # The Q2_K model as a split file only, in llama.cpp's gguf-split format.
    for part in split_gguf(folder / "Tiny-Q2_K.gguf", folder / "Tiny-Q2_K", 2):
        files[part.name] = part.read_bytes()
    return files


@pytest.fixture
def fake_hub(tmp_path, monkeypatch, gguf_bytes):
    """The fake hub serving REPO, and huggingface_hub's settings pointed at it and at tmp folders
    (its constants are read at import, so they are patched, not only the environment)."""
    in_repo = {name: data for name, data in gguf_bytes.items() if name != "Tiny-Q2_K.gguf"}
    fake = FakeHub(repos={REPO: in_repo, "tester/OnlyProjector": {
        "Tiny-mmproj-f16.gguf": gguf_bytes["Tiny-mmproj-f16.gguf"]}})
    server = FakeHubServer(fake)
    monkeypatch.setattr(constants, "ENDPOINT", fake.url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                        fake.url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf" / "token"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # edgeinfer's verified markers
    yield fake
    server.stop()


def test_names_parse_with_either_prefix_a_revision_and_a_tag():
    assert parse_hub_name("hf.co/a/b") == hub.HubName("a/b")
    assert parse_hub_name("huggingface.co/a/b-GGUF:q8_0") == hub.HubName("a/b-GGUF", "q8_0")
    assert parse_hub_name("hf.co/a/b@v1.0:Q4_0") == hub.HubName("a/b", "Q4_0", "v1.0")
    assert parse_hub_name("hf.co/a/b:latest") == hub.HubName("a/b")  # Ollama's default tag
    with pytest.raises(HubError, match="OWNER/REPO"):
        parse_hub_name("hf.co/only-owner")


def test_default_tag_picks_q4_k_m_and_the_file_loads(fake_hub, gguf_bytes):
    path = pull_hub_model(f"hf.co/{REPO}")
    assert path.name == "Tiny-Q4_K_M.gguf"
    assert path.read_bytes() == gguf_bytes["Tiny-Q4_K_M.gguf"]
    assert Model.load(path, n_ctx=64).n_vocab > 0


@pytest.mark.parametrize("tag", ["Q8_0", "q8_0"])
def test_tag_picks_its_file_case_insensitively(fake_hub, tag):
    assert pull_hub_model(f"hf.co/{REPO}:{tag}").name == "Tiny-Q8_0.gguf"


def test_no_matching_tag_lists_the_model_tags(fake_hub):
    with pytest.raises(HubError) as err:
        pull_hub_model(f"huggingface.co/{REPO}:Q5_K_S")
    assert "available: Q2_K, Q4_K_M, Q8_0" in str(err.value)  # no mmproj, a split file once
    assert not fake_hub.downloads("Tiny-Q4_K_M.gguf")


def test_a_projector_is_never_the_model(fake_hub):
    with pytest.raises(HubError, match="no GGUF model file"):
        pull_hub_model("hf.co/tester/OnlyProjector")


def test_a_split_model_pulls_every_part_and_loads_as_the_whole(fake_hub, gguf_bytes, tmp_path):
    path = pull_hub_model(f"hf.co/{REPO}:Q2_K")
    assert path.name == "Tiny-Q2_K-00001-of-00002.gguf"
    second = path.with_name("Tiny-Q2_K-00002-of-00002.gguf")
    assert second.read_bytes() == gguf_bytes[second.name]
    whole = tmp_path / "whole.gguf"
    whole.write_bytes(gguf_bytes["Tiny-Q2_K.gguf"])
    np.testing.assert_array_equal(Model.load(path, n_ctx=64).eval_logits([1, 5, 9]),
                                  Model.load(whole, n_ctx=64).eval_logits([1, 5, 9]))
    assert hub.cached_hub_model(f"hf.co/{REPO}:Q2_K") == path
    second.unlink()  # a part missing from the cache: the model is not cached
    assert hub.cached_hub_model(f"hf.co/{REPO}:Q2_K") is None


def test_a_dropped_connection_resumes_with_a_range_request(fake_hub, gguf_bytes, monkeypatch):
    # huggingface_hub keeps whole chunks only; its chunk (10 MB) is larger than the tiny file.
    chunk = 4096
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", chunk)
    name = "Tiny-Q8_0.gguf"
    fake_hub.drop_once.add(name)
    path = pull_hub_model(f"hf.co/{REPO}:Q8_0")
    kept = len(gguf_bytes[name]) // 2 // chunk * chunk
    assert fake_hub.downloads(name) == [None, f"bytes={kept}-"]
    assert path.read_bytes() == gguf_bytes[name]


def test_wrong_bytes_are_refused_and_deleted(fake_hub, gguf_bytes):
    name = "Tiny-Q4_K_M.gguf"
    fake_hub.corrupt.add(name)
    with pytest.raises(HubError, match="does not match the Hub's sha256"):
        pull_hub_model(f"hf.co/{REPO}")
    assert hub.cached_hub_model(f"hf.co/{REPO}") is None
    sha = hashlib.sha256(gguf_bytes[name]).hexdigest()
    assert not hub._marker(sha).exists()
    fake_hub.corrupt.clear()  # the next pull fetches the file again, and it passes
    assert pull_hub_model(f"hf.co/{REPO}").read_bytes() == gguf_bytes[name]
    assert hub._marker(sha).exists()


def test_a_second_pull_neither_downloads_nor_hashes(fake_hub, monkeypatch):
    first = pull_hub_model(f"hf.co/{REPO}")
    hashed = []
    monkeypatch.setattr(hub, "sha256_file", lambda *a: hashed.append(a) or "")
    assert pull_hub_model(f"hf.co/{REPO}") == first
    assert fake_hub.downloads("Tiny-Q4_K_M.gguf") == [None] and not hashed
    heads = [p for m, p, _, _ in fake_hub.requests if m == "HEAD"]
    # Each pull asks which commit the file is at, as llama.cpp does; the first asks twice: for
    # the download, and when huggingface_hub links the downloaded blob into the snapshot.
    assert len(heads) == 3


def test_offline_mode_uses_the_cache_without_the_hub(fake_hub, monkeypatch):
    first = pull_hub_model(f"hf.co/{REPO}:Q8_0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    n_requests = len(fake_hub.requests)
    assert pull_hub_model(f"hf.co/{REPO}:q8_0") == first
    assert resolve_model(f"hf.co/{REPO}:Q8_0") == first
    assert len(fake_hub.requests) == n_requests
    with pytest.raises(HubError, match="not in the Hugging Face cache.*HF_HUB_OFFLINE"):
        pull_hub_model("hf.co/tester/NeverPulled")


@pytest.mark.parametrize("status, fragments", [
    (404, ["no such repository", "HTTP 404"]),
    (401, ["no such repository", "HTTP 401", "hf auth login", "HF_TOKEN"]),
    (403, ["is gated", "HF_TOKEN"]),
])
def test_hub_errors_are_one_line(fake_hub, status, fragments):
    fake_hub.status["tester/Private"] = status
    with pytest.raises(HubError) as err:
        pull_hub_model("hf.co/tester/Private")
    message = str(err.value)
    assert "\n" not in message and all(f in message for f in fragments), message


def test_the_token_is_sent(fake_hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    pull_hub_model(f"hf.co/{REPO}")
    assert {auth for *_, auth in fake_hub.requests} == {"Bearer hf_test_token"}


def test_resolve_model_pulls_a_hub_name(fake_hub, gguf_bytes):
    with pytest.raises(FileNotFoundError, match="edgeinfer pull hf.co/"):
        resolve_model(f"hf.co/{REPO}", pull=False)
    path = resolve_model(f"hf.co/{REPO}")
    assert path.read_bytes() == gguf_bytes["Tiny-Q4_K_M.gguf"]
    assert resolve_model(f"hf.co/{REPO}", pull=False) == path


def test_cli_pull_exits_0_and_a_second_pull_downloads_nothing(fake_hub, tmp_path):
    env = {"HF_ENDPOINT": fake_hub.url, "HF_HOME": str(tmp_path / "hf"),
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    first = run_cli("pull", f"hf.co/{REPO}:Q8_0", env=env, timeout=120)
    assert first.returncode == 0, first.stderr
    assert "pulled" in first.stderr and "Tiny-Q8_0.gguf" in first.stderr
    second = run_cli("pull", f"hf.co/{REPO}:Q8_0", env=env, timeout=120)
    assert second.returncode == 0, second.stderr
    assert "already present" in second.stderr
    assert fake_hub.downloads("Tiny-Q8_0.gguf") == [None]
    assert_clean_error(run_cli("pull", f"hf.co/{REPO}:Q3_K", env=env, timeout=120),
                       "no file for quant", "Q4_K_M")


def test_a_server_finds_a_pulled_hub_model_by_name(fake_hub):
    from edgeinfer.server.served_models import find
    assert find([], f"hf.co/{REPO}:q8_0") is None  # not pulled: not served
    path = pull_hub_model(f"hf.co/{REPO}:Q8_0")
    served = find([], f"hf.co/{REPO}:q8_0")
    assert served.path == path and served.model_id == f"hf.co/{REPO}:q8_0"
    assert find([], "hf.co/tester/NeverPulled") is None and find([], "smollm2") is None


def test_cli_runs_a_hub_name_and_errors_are_one_line(fake_hub, tmp_path):
    env = {"HF_ENDPOINT": fake_hub.url, "HF_HOME": str(tmp_path / "hf"),
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    info = run_cli("info", f"hf.co/{REPO}", env=env, timeout=120)
    assert info.returncode == 0, info.stderr
    fake_hub.status["tester/Private"] = 401
    assert_clean_error(run_cli("run", "hf.co/tester/Private", "-p", "hi", env=env, timeout=120),
                       "no such repository", "hf auth login")
    assert_clean_error(run_cli("pull", "hf.co/tester/NeverPulled", env={**env, "HF_HUB_OFFLINE": "1"},
                               timeout=120), "HF_HUB_OFFLINE")


def test_an_unreachable_hub_falls_back_to_the_cache(fake_hub, monkeypatch):
    first = pull_hub_model(f"hf.co/{REPO}")
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    assert pull_hub_model(f"hf.co/{REPO}") == first
    with pytest.raises(HubError) as err:
        pull_hub_model("hf.co/tester/NeverPulled")
    assert "cannot reach the Hugging Face Hub" in str(err.value) and "\n" not in str(err.value)


class TransferLog(PullReporter):
    """Records each transfer's label, total and the bytes reported done."""

    def __init__(self):
        self.transfers = []

    @contextmanager
    def transfer(self, text, total):
        record = [text, total, 0]
        self.transfers.append(record)
        yield lambda n: record.__setitem__(2, record[2] + n)


def test_progress_goes_to_the_reporter_also_across_a_resume(fake_hub, gguf_bytes, monkeypatch):
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 4096)
    fake_hub.drop_once.add("Tiny-Q8_0.gguf")
    log = TransferLog()
    pull_hub_model(f"hf.co/{REPO}:Q8_0", reporter=log)
    size = len(gguf_bytes["Tiny-Q8_0.gguf"])
    assert log.transfers == [["downloading Tiny-Q8_0.gguf", size, size],
                             ["verifying Tiny-Q8_0.gguf", size, size]]


# -- resuming a pull that was killed --------------------------------------------------------

KILLED_PULL = """
import sys
from huggingface_hub import constants
constants.DOWNLOAD_CHUNK_SIZE = 4096   # whole chunks reach the partial file before the kill
from edgeinfer.cli import main
sys.exit(main(["pull", sys.argv[1]]))
"""


def test_a_killed_pull_resumes_from_its_partial(fake_hub, gguf_bytes, tmp_path):
    name = "Tiny-Q8_0.gguf"
    data, sha = gguf_bytes[name], hashlib.sha256(gguf_bytes[name]).hexdigest()
    fake_hub.stall.add(name)  # half the file, then the server waits: the pull is killed there
    env = child_env(HF_ENDPOINT=fake_hub.url, HF_HOME=str(tmp_path / "hf"),
                    XDG_CACHE_HOME=str(tmp_path / "cache"), HF_HUB_DISABLE_TELEMETRY="1")
    proc = subprocess.Popen([sys.executable, "-c", KILLED_PULL, f"hf.co/{REPO}:Q8_0"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    partial = partial_path(REPO, sha)
    kept = len(data) // 2 // 4096 * 4096
    deadline = time.monotonic() + 60
    while not (partial.exists() and partial.stat().st_size >= kept) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.kill()
    proc.wait(timeout=30)
    assert partial.stat().st_size == kept and partial.read_bytes() == data[:kept]
    fake_hub.stall.clear()
    fake_hub.release.set()
    path = pull_hub_model(f"hf.co/{REPO}:Q8_0")
    assert fake_hub.downloads(name) == [None, f"bytes={kept}-"]
    assert path.read_bytes() == data and not partial.exists()
    # Where huggingface_hub and other tools look for it.
    assert hf_hub_download(REPO, name, local_files_only=True) == str(path)
    assert path.resolve() == partial.with_name(sha)


def test_a_pull_that_runs_out_of_retries_keeps_its_bytes_for_the_next(fake_hub, gguf_bytes,
                                                                      monkeypatch):
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 4096)
    monkeypatch.setattr(time, "sleep", lambda seconds: None)  # huggingface_hub's retry pauses
    name = "Tiny-Q8_0.gguf"
    data, sha = gguf_bytes[name], hashlib.sha256(gguf_bytes[name]).hexdigest()
    fake_hub.drop_always.add(name)
    with pytest.raises(HubError, match="connection .* lost.*bytes are kept") as err:
        pull_hub_model(f"hf.co/{REPO}:Q8_0")
    assert "\n" not in str(err.value)
    partial = partial_path(REPO, sha)
    have = partial.stat().st_size
    assert 0 < have < len(data) and partial.read_bytes() == data[:have]
    fake_hub.drop_always.clear()
    assert pull_hub_model(f"hf.co/{REPO}:Q8_0").read_bytes() == data
    assert fake_hub.downloads(name)[-1] == f"bytes={have}-" and not partial.exists()


def test_a_partial_with_wrong_bytes_is_deleted(fake_hub, gguf_bytes):
    name = "Tiny-Q8_0.gguf"
    data, sha = gguf_bytes[name], hashlib.sha256(gguf_bytes[name]).hexdigest()
    partial = partial_path(REPO, sha)
    partial.parent.mkdir(parents=True)
    partial.write_bytes(bytes(b ^ 1 for b in data[:1000]))  # not a prefix of the file
    with pytest.raises(HubError, match="does not match the Hub's sha256.*deleted"):
        pull_hub_model(f"hf.co/{REPO}:Q8_0")
    assert fake_hub.downloads(name) == ["bytes=1000-"] and not partial.exists()
    assert pull_hub_model(f"hf.co/{REPO}:Q8_0").read_bytes() == data  # and the next pull passes
    assert fake_hub.downloads(name) == ["bytes=1000-", None]


def test_a_partial_longer_than_the_file_starts_over(fake_hub, gguf_bytes):
    name = "Tiny-Q8_0.gguf"
    data, sha = gguf_bytes[name], hashlib.sha256(gguf_bytes[name]).hexdigest()
    partial = partial_path(REPO, sha)
    partial.parent.mkdir(parents=True)
    partial.write_bytes(data + b"extra")
    assert pull_hub_model(f"hf.co/{REPO}:Q8_0").read_bytes() == data
    assert fake_hub.downloads(name) == [None] and not partial.exists()
