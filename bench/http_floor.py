"""The HTTP floor: server CPU per request of a trivial ASGI app under uvicorn.

The app reads a ~1 KB JSON body and answers 1.5 KB, as a lean stream chunk does; nothing
else. Its server CPU per request (schedstat, as bench/stream_derender.py measures ours) is
what any app pays on this machine for uvicorn's protocol, the loopback TCP and, with
`--access-log`, uvicorn's access-log line (with the log-record switches `render-service serve`
sets). Final stdout line: JSON with both numbers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.stream_derender import task_cpu_ns  # noqa: E402
from tests.render.ref_server import free_port  # noqa: E402

_APP = '''
from render_service.http.startup_log import lean_log_records

lean_log_records()
BODY = b'{"x":"' + b"a" * 1500 + b'"}'
HEADERS = [(b"content-length", str(len(BODY)).encode()), (b"content-type", b"application/json")]


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})
'''


def measure(app_dir: Path, access_log: bool, n: int) -> float:
    port = free_port()
    flag = "--access-log" if access_log else "--no-access-log"
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "floor_app:app", "--port", str(port), flag],
                            cwd=app_dir, env={**os.environ, "PYTHONPATH": f"{app_dir}:{REPO}"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/"
        body = b'{"a":"' + b"b" * 900 + b'"}'
        headers = {"content-type": "application/json"}
        with httpx.Client() as client:
            for _ in range(100):  # until it listens, then warm
                try:
                    client.post(url, content=body, headers=headers)
                except httpx.HTTPError:
                    time.sleep(0.2)
            cpu0 = task_cpu_ns(proc.pid)
            for _ in range(n):
                client.post(url, content=body, headers=headers).raise_for_status()
            return (task_cpu_ns(proc.pid) - cpu0) / n / 1e6
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    app_dir = REPO / ".cache" / "bench-http-floor"
    app_dir.mkdir(parents=True, exist_ok=True)
    (app_dir / "floor_app.py").write_text(_APP)
    n = 2000
    result = {"bench": "http_floor", "requests": n,
              "server_cpu_ms_per_request_access_log": round(measure(app_dir, True, n), 3),
              "server_cpu_ms_per_request_no_access_log": round(measure(app_dir, False, n), 3)}  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    main()
