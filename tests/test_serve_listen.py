"""`edgeinfer serve` takes its address before anything else (edgeinfer/cli/listen.py): a port in
use, a host not of this machine or a port out of range is one error line, before the model loads."""
from __future__ import annotations

import socket
import time

import pytest

from edgeinfer.cli.args import build_parser
from edgeinfer.cli.listen import bind_sockets
from edgeinfer.errors import EdgeInferError
from support.cli import assert_clean_error, run_cli


def test_a_port_in_use_is_one_line_before_the_model_loads(tiny_llama_path):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        start = time.monotonic()
        proc = run_cli("serve", str(tiny_llama_path), "--port", str(port), "-t", "1", timeout=60)
    assert_clean_error(proc, f"cannot listen on 127.0.0.1:{port}: Address already in use")
    assert len(proc.stderr.splitlines()) == 1 and "loaded" not in proc.stderr
    assert time.monotonic() - start < 10


def test_a_host_that_is_not_an_address_of_this_machine_is_refused():
    with pytest.raises(EdgeInferError, match=r"cannot listen on 256\.1\.1\.1:8080: "):
        bind_sockets("256.1.1.1", 8080)


def test_port_zero_takes_a_free_port_which_is_then_in_use():
    (listening,) = bind_sockets("127.0.0.1", 0)
    with listening:
        port = listening.getsockname()[1]
        assert port > 0
        with pytest.raises(EdgeInferError, match=f"cannot listen on 127.0.0.1:{port}: Address already in use"):
            bind_sockets("127.0.0.1", port)


@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_a_port_out_of_range_is_an_argument_error(port, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["serve", "--port", port])
    assert exit_.value.code == 2
    assert f"argument --port: a TCP port is 0 to 65535, got {port}" in capsys.readouterr().err
