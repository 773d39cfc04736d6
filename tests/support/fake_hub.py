"""A local stand-in for the Hugging Face Hub: the endpoints huggingface_hub's `model_info` and
`hf_hub_download` call, served from memory by a stdlib HTTP server in a thread.

- ``GET /api/models/{repo}[/revision/{rev}]``: the repo's commit and files, each with its size and
  LFS sha256 (what ``files_metadata=True`` asks for);
- ``HEAD`` / ``GET /{repo}/resolve/{rev}/{file}``: the headers hf_hub_download reads
  (X-Repo-Commit, X-Linked-Etag, X-Linked-Size, Content-Length) and the bytes, honouring
  ``Range: bytes=N-`` with a 206.

Faults a test can ask for: `drop_once` (the next full GET of a file sends half its bytes, then
closes the connection), `stall` (a full GET of a file sends half its bytes, then waits for
`release` before closing: the client can be killed mid-file), `drop_always` (every GET of a file,
ranged or not, sends half of what it asks for, then closes), `corrupt` (serve other bytes of the same length, with the right sha256
in the headers), `status` (a repo answers every request with an HTTP error and the hub's
X-Error-Code). Every request is recorded as (method, path, Range header, Authorization header).
"""
from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"
ERROR_CODES = {404: "RepoNotFound", 401: "RepoNotFound", 403: "GatedRepo"}


@dataclass
class FakeHub:
    repos: dict[str, dict[str, bytes]] = field(default_factory=dict)   # repo -> file -> bytes
    drop_once: set[str] = field(default_factory=set)
    stall: set[str] = field(default_factory=set)
    drop_always: set[str] = field(default_factory=set)
    release: threading.Event = field(default_factory=threading.Event)
    corrupt: set[str] = field(default_factory=set)
    status: dict[str, int] = field(default_factory=dict)               # repo -> HTTP status
    requests: list[tuple[str, str, str | None, str | None]] = field(default_factory=list)
    url: str = ""

    def downloads(self, name: str) -> list[str | None]:
        """The Range header of every GET of file `name` (None for a full GET)."""
        return [r for method, path, r, _ in self.requests
                if method == "GET" and "/resolve/" in path and path.endswith("/" + name)]


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet: pytest shows failures, not traffic
            pass

        def _send(self, status: int, headers: dict[str, str], body: bytes = b"") -> None:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            if body and self.command != "HEAD":
                self.wfile.write(body)

        def _error(self, status: int) -> None:
            body = json.dumps({"error": "fake hub error"}).encode()
            self._send(status, {"X-Error-Code": ERROR_CODES.get(status, "Error"),
                                "Content-Type": "application/json",
                                "Content-Length": str(len(body))}, body)

        def _route(self) -> None:
            path = unquote(urlsplit(self.path).path)
            hub.requests.append((self.command, path, self.headers.get("Range"),
                                 self.headers.get("Authorization")))
            if path.startswith("/api/models/"):
                repo = "/".join(path.removeprefix("/api/models/").split("/")[:2])
                return self._model_info(repo)
            owner, name, kind, _rev, *rest = path.strip("/").split("/") + [""] * 4
            repo = f"{owner}/{name}"
            if kind != "resolve" or repo not in hub.repos:
                return self._error(hub.status.get(repo, 404))
            if repo in hub.status:
                return self._error(hub.status[repo])
            filename = "/".join(p for p in rest if p)
            data = hub.repos[repo].get(filename)
            if data is None:
                return self._send(404, {"X-Error-Code": "EntryNotFound", "Content-Length": "0"})
            self._file(filename, data)

        def _model_info(self, repo: str) -> None:
            if repo in hub.status or repo not in hub.repos:
                return self._error(hub.status.get(repo, 404))
            siblings = [{"rfilename": f, "size": len(d), "blobId": hashlib.sha1(d).hexdigest(),
                         "lfs": {"size": len(d), "sha256": hashlib.sha256(d).hexdigest(),
                                 "pointerSize": 134}}
                        for f, d in hub.repos[repo].items()]
            body = json.dumps({"id": repo, "sha": COMMIT, "siblings": siblings}).encode()
            self._send(200, {"Content-Type": "application/json",
                             "Content-Length": str(len(body))}, body)

        def _file(self, filename: str, data: bytes) -> None:
            sha = hashlib.sha256(data).hexdigest()
            headers = {"X-Repo-Commit": COMMIT, "X-Linked-Etag": f'"{sha}"', "ETag": f'"{sha}"',
                       "X-Linked-Size": str(len(data)), "Accept-Ranges": "bytes"}
            if filename in hub.corrupt:
                data = bytes(b ^ 0xFF for b in data)
            start = 0
            ranged = self.headers.get("Range")
            if ranged and ranged.startswith("bytes=") and self.command == "GET":
                start = int(ranged.removeprefix("bytes=").split("-")[0])
                headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            body = data[start:]
            headers["Content-Length"] = str(len(body))
            cut = self.command == "GET" and (filename in hub.drop_always or not ranged and (
                filename in hub.drop_once or filename in hub.stall))
            if cut:
                hub.drop_once.discard(filename)
                self.send_response(206 if start else 200)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body[:len(body) // 2])
                self.wfile.flush()
                if filename in hub.stall:
                    hub.release.wait(60)
                self.close_connection = True  # the client sees a body cut short
                return
            self._send(206 if start else 200, headers, body)

        do_GET = do_HEAD = _route

    return Handler


class FakeHubServer:
    """`FakeHub` served on 127.0.0.1 on a free port until `stop`."""

    def __init__(self, hub: FakeHub) -> None:
        self.hub = hub
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
        self.server.daemon_threads = True
        hub.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.hub.release.set()
        self.server.shutdown()
        self.server.server_close()
