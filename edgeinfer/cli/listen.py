"""``edgeinfer serve``'s listening sockets, bound before anything slow happens (pulling or loading a
model), so an address that cannot be had is one ``error:`` line at once, not a uvicorn traceback
after the model loaded. uvicorn is handed the listening sockets and serves them.

The binding follows asyncio's `loop.create_server(host=, port=)`, which uvicorn would otherwise
call: one socket per address the host resolves to (``localhost`` may be 127.0.0.1 and ::1),
SO_REUSEADDR (a restarted server need not wait out TIME_WAIT), IPv6 sockets IPv6-only."""
from __future__ import annotations

import socket

from edgeinfer.errors import EdgeInferError


def display_address(host: str, port: int) -> str:
    """host:port as a URL writes it ([::1]:8080 for an IPv6 address)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_sockets(host: str, port: int) -> list[socket.socket]:
    """Sockets listening on every address of `host` at `port` (0: one free port, the same for all);
    EdgeInferError naming host:port and the reason when any cannot be bound."""
    where = display_address(host, port)
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise EdgeInferError(f"cannot listen on {where}: {exc.strerror} (--host takes an address or a name of "
                             "this machine)") from None
    bound: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            if port == 0 and bound:   # the other addresses take the port the first one got
                address = (address[0], bound[0].getsockname()[1], *address[2:])
            sock = socket.socket(family, kind, proto)
            bound.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen()   # now, not when uvicorn starts: a port bound but not yet listened on is not taken
    except OSError as exc:
        for sock in bound:
            sock.close()
        raise EdgeInferError(f"cannot listen on {where}: {exc.strerror or exc}") from None
    return bound
