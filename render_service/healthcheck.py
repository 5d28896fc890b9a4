"""The container health check: GET /health on the port the server actually listens on.

Docker runs HEALTHCHECK commands as separate processes that cannot see how the server was
started, so `docker run IMAGE serve --port 9000` would be probed on the image's default port.
This probe reads the server's own command line and environment from /proc/<pid> (PID 1 in a
container: the entry point execs `render-service`; with `--init`, PID 1 is the init, whose
command line holds the same arguments) and resolves host and port as the CLI does: the last
`--port N` / `--port=N` flag, else RENDER_SERVICE_PORT, else 8000 (same for --host).

Standard library only, and `render_service/__init__` imports nothing, so a probe is cheap.
Exit status 0: healthy (200 within the timeout); 1 otherwise.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

__all__ = ["probe", "target"]

_WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")


def probe(path: str = "/health", *, pid: int = 1, timeout_s: float = 4.0) -> int:
    """0 if the server started as process `pid` answers `path` with 200, else 1."""
    host, port = target(_cmdline(pid), _environ(pid))
    url = f"http://{host}:{port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # http only: url is built above
            return 0 if response.status == 200 else 1
    except (urllib.error.URLError, OSError) as exc:
        print(f"unhealthy: {url}: {exc}", file=sys.stderr)
        return 1


def target(argv: list[str], environ: dict[str, str]) -> tuple[str, str]:
    """(host to connect to, port) for a server started with `argv` and `environ`."""
    host = _last_flag(argv, "--host") or environ.get("RENDER_SERVICE_HOST") or "127.0.0.1"
    port = _last_flag(argv, "--port") or environ.get("RENDER_SERVICE_PORT") or "8000"
    if host in _WILDCARD_HOSTS:  # listening everywhere: loopback reaches it
        host = "127.0.0.1"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 literal
    return host, port


def _last_flag(argv: list[str], flag: str) -> str | None:
    value = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # another user's process, or no /proc: fall back to our own environment
        return dict(os.environ)
    pairs = (part.decode(errors="replace").partition("=") for part in raw.split(b"\0") if part)
    return {key: value for key, _, value in pairs}


if __name__ == "__main__":
    sys.exit(probe())
