"""`edgeinfer serve` options: defaults, the model ids a server answers to, the bind warning."""
from __future__ import annotations

from pathlib import Path

import pytest

from edgeinfer.cli.args import build_parser
from edgeinfer.cli.serve import bind_warning, make_config
from edgeinfer.sampling import DEFAULTS
from edgeinfer.server.config import is_loopback
from edgeinfer.server.served_models import model_ids, single_model


def test_defaults_bind_loopback_8080_without_key_or_cors():
    args = build_parser().parse_args(["serve"])
    assert (args.host, args.port, args.api_key, args.cors_origin, args.alias) == ("127.0.0.1", 8080, None, [], None)
    assert (args.ctx_size, args.cache_type_k, args.temperature, args.top_k) == (2048, "f16", DEFAULTS.temperature,
                                                                               DEFAULTS.top_k)


def test_options_reach_the_config(monkeypatch):
    monkeypatch.delenv("EDGEINFER_API_KEY", raising=False)
    args = build_parser().parse_args(["serve", "smollm2", "--alias", "mine", "--api-key", "k", "-c", "512",
                                      "--ctk", "q8_0", "--temp", "0.2", "-n", "16", "--cors-origin", "http://a"])
    config = make_config(args)
    served = single_model(Path("/m/SmolLM2-135M-Instruct.Q4_1.gguf"), args.model, args.alias)
    assert served.model_id == "mine" and {"mine", "smollm2", "smollm2-135m-instruct"} <= served.accepted_ids
    assert (config.api_key, config.n_ctx, config.cache_type_k, config.max_tokens_limit) == ("k", 512, "q8_0", 16)
    assert config.sampling.temperature == 0.2 and config.cors_origins == ("http://a",)
    assert config.speculative   # on unless --no-speculative
    off = make_config(build_parser().parse_args(["serve", "--no-speculative"]))
    assert not off.speculative


def test_api_key_from_the_environment(monkeypatch):
    monkeypatch.setenv("EDGEINFER_API_KEY", "from-env")
    config = make_config(build_parser().parse_args(["serve"]))
    assert config.api_key == "from-env"


def test_model_ids_of_an_unknown_file_are_its_name_and_stem():
    model_id, accepted = model_ids(Path("/tmp/my-model.Q8_0.gguf"), "/tmp/my-model.Q8_0.gguf", None)
    assert model_id == "my-model.Q8_0" and {"my-model.Q8_0", "my-model.Q8_0.gguf"} <= accepted


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("127.0.0.2", True), ("localhost", True),
                                            ("::1", True), ("[::1]", True), ("0.0.0.0", False),
                                            ("192.168.1.5", False), ("::", False), ("example.com", False)])
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_binding_beyond_loopback_warns_louder_without_a_key():
    assert bind_warning("127.0.0.1", False) is None
    assert "other machines" in bind_warning("0.0.0.0", True) and "--api-key" not in bind_warning("0.0.0.0", True)
    assert "--api-key" in bind_warning("0.0.0.0", False)
