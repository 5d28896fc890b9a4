"""A 127.0.0.1 stand-in for the huggingface hub: serves one folder as repo `repo_id` through
the endpoints `huggingface_hub.snapshot_download` uses (repo info, file tree, resolve)."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def serve_repo(repo_id: str, folder: Path) -> tuple[ThreadingHTTPServer, list[str]]:
    """(running server, log of "METHOD path" requests); stop with server.shutdown()."""
    files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    requests: list[str] = []
    routes = {f"/api/models/{repo_id}/revision/main": {"id": repo_id, "sha": COMMIT,
                                                       "siblings": [{"rfilename": n} for n in files]},
              f"/api/models/{repo_id}/tree/{COMMIT}": [{"type": "file", "path": n, "size": len(b),
                                                        "oid": hashlib.sha1(b).hexdigest()} for n, b in files.items()]}
    resolve = f"/{repo_id}/resolve/{COMMIT}/"

    class Hub(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            requests.append(f"{self.command} {path}")
            if path in routes:
                self.answer(200, json.dumps(routes[path]).encode(), [("Content-Type", "application/json")])
            elif path.startswith(resolve) and path[len(resolve):] in files:
                body = files[path[len(resolve):]]
                self.answer(200, body, [("X-Repo-Commit", COMMIT), ("ETag", f'"{hashlib.sha1(body).hexdigest()}"')])
            else:
                self.answer(404, b'{"error": "not found"}', [("X-Error-Code", "RepoNotFound")])

        do_HEAD = do_GET

        def answer(self, status: int, body: bytes, headers: list[tuple[str, str]]) -> None:
            self.send_response(status)
            for name, value in [*headers, ("Content-Length", str(len(body)))]:
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, requests
