"""The image's HEALTHCHECK probe (render_service/healthcheck.py) follows the port in use.

`docker run IMAGE serve --port 9000` must be probed on 9000, not on RENDER_SERVICE_PORT's
8000: the probe reads the server's command line and environment from /proc/<pid>. Here a
real process started like the server (`... serve --port N`) answers /health, and the probe is
pointed at its pid, which in the container is 1.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from render_service.healthcheck import probe, target
from tests.harness.ports import free_port

# A stand-in server with the real CLI's argv shape: it serves /health on its --port.
FAKE_SERVER = """
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
port = int(sys.argv[sys.argv.index("--port") + 1])
class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


@pytest.fixture
def server_on_flag_port() -> Iterator[tuple[int, int]]:
    """(pid, port): started as `python -c ... serve --port PORT` with RENDER_SERVICE_PORT=1."""
    port = free_port()
    env = {**os.environ, "RENDER_SERVICE_PORT": "1"}  # what the old check would have probed
    proc = subprocess.Popen([sys.executable, "-c", FAKE_SERVER, "serve", "--port", str(port)], env=env)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield proc.pid, port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_probe_follows_the_port_flag_of_the_running_server(server_on_flag_port: tuple[int, int]) -> None:
    pid, _ = server_on_flag_port
    assert probe("/health", pid=pid) == 0
    assert probe("/not-health", pid=pid) == 1


def test_probe_reports_a_dead_server_unhealthy(server_on_flag_port: tuple[int, int]) -> None:
    pid, port = server_on_flag_port
    assert target(["render-service", "serve", "--port", str(free_port())], {}) != ("127.0.0.1", str(port))
    os.kill(pid, 15)
    time.sleep(0.5)
    assert probe("/health", pid=pid, timeout_s=2) == 1


@pytest.mark.parametrize(
    "argv, environ, expected",
    [
        (["render-service", "serve"], {}, ("127.0.0.1", "8000")),
        (["render-service", "serve"], {"RENDER_SERVICE_PORT": "8100"}, ("127.0.0.1", "8100")),
        (["render-service", "serve", "--port", "9000"], {"RENDER_SERVICE_PORT": "8000"}, ("127.0.0.1", "9000")),
        (["render-service", "serve", "--port=9001"], {}, ("127.0.0.1", "9001")),
        (["x", "--port", "1", "--port", "2"], {}, ("127.0.0.1", "2")),  # argparse: the last one wins
        (["tini", "--", "/usr/local/bin/render-service-entrypoint", "gateway", "--port", "9002"], {},
         ("127.0.0.1", "9002")),
        (["render-service", "serve", "--host", "0.0.0.0"], {}, ("127.0.0.1", "8000")),
        (["render-service", "serve", "--host", "10.1.2.3"], {}, ("10.1.2.3", "8000")),
        (["render-service", "serve"], {"RENDER_SERVICE_HOST": "::"}, ("127.0.0.1", "8000")),
        (["render-service", "serve", "--host", "fd00::1"], {}, ("[fd00::1]", "8000")),
    ],
)  # fmt: skip
def test_target_resolves_host_and_port_like_the_cli(argv: list[str], environ: dict, expected: tuple) -> None:
    assert target(argv, environ) == expected


def test_the_dockerfile_uses_the_probe() -> None:
    from pathlib import Path

    dockerfile = (Path(__file__).resolve().parents[2] / "Dockerfile").read_text()
    assert "from render_service.healthcheck import probe; sys.exit(probe('/health'))" in dockerfile
