"""MODEL as a hub id: the local cache first, else a download of the rendering files only
(never the weights), unless HF_HUB_OFFLINE=1; a clear start-up error when neither works.

There is no network to the real hub here: HF_ENDPOINT points at a 127.0.0.1 stand-in
(fake_hub.py) serving a weightless Qwen3 repo through the endpoints huggingface_hub uses.
Each case runs in a fresh process (huggingface_hub reads HF_ENDPOINT / HF_HUB_OFFLINE /
HF_HOME when imported) with an empty HF_HOME.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..render.ref_server import build_render_model_dir
from .fake_hub import serve_repo

REPO_ID = "acme/tiny-qwen3"
LOAD = """
import json, os, sys
from render_service.api import Renderer
from render_service.config import ServiceConfig
hub = Renderer(ServiceConfig(model=sys.argv[1]))
local = Renderer(ServiceConfig(model=sys.argv[2]))
chat = {"messages": [{"role": "user", "content": "Hi there"}]}
folder = hub.bundle.hf_tokenizer.name_or_path
print(json.dumps({"files": sorted(os.listdir(folder)), "same_tokens": hub.render_chat(chat)["token_ids"]
                  == local.render_chat(chat)["token_ids"], "max_model_len": hub.max_model_len}))
"""


@pytest.fixture(scope="module")
def repo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = build_render_model_dir(tmp_path_factory.mktemp("hub-repo"))
    (folder / "model.safetensors").write_bytes(b"\0" * 1024)  # weights: must never be fetched
    return folder


@pytest.fixture
def hub(repo_dir: Path) -> Iterator[tuple[str, list[str]]]:
    server, requests = serve_repo(REPO_ID, repo_dir)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()


def hub_env(hf_home: Path, *, endpoint: str | None = None, offline: bool = False) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "HUGGINGFACE_", "RENDER_SERVICE_")) and k != "TRANSFORMERS_OFFLINE"}  # fmt: skip
    env |= {"HF_HOME": str(hf_home), "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    if endpoint:
        env["HF_ENDPOINT"] = endpoint
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return env


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=300, check=False)


def test_hub_id_is_downloaded_without_weights_then_served_from_the_cache(
    hub: tuple[str, list[str]], repo_dir: Path, tmp_path: Path
) -> None:
    endpoint, requests = hub
    online = run(["-c", LOAD, REPO_ID, str(repo_dir)], hub_env(tmp_path, endpoint=endpoint))
    assert online.returncode == 0, online.stderr[-3000:]
    result = json.loads(online.stdout.strip().splitlines()[-1])
    assert result["same_tokens"] and result["max_model_len"] == 40960
    assert "model.safetensors" not in result["files"]
    assert {"config.json", "tokenizer.json", "tokenizer_config.json"} <= set(result["files"])
    assert not any("model.safetensors" in r for r in requests)
    # The second start needs no hub: HF_HUB_OFFLINE=1 and the same cache.
    cached = run(["-c", LOAD, REPO_ID, str(repo_dir)], hub_env(tmp_path, offline=True))
    assert cached.returncode == 0, cached.stderr[-3000:]
    assert json.loads(cached.stdout.strip().splitlines()[-1])["same_tokens"]


def test_offline_and_not_cached_is_a_clear_start_up_error(tmp_path: Path) -> None:
    result = run(["-m", "render_service.cli", "serve", REPO_ID], hub_env(tmp_path, offline=True))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (f"render-service: error: model '{REPO_ID}' is neither a local folder nor in the local huggingface "
            "cache, and downloading is off (HF_HUB_OFFLINE=1") in result.stderr  # fmt: skip


def test_unknown_repo_is_a_clear_start_up_error(hub: tuple[str, list[str]], tmp_path: Path) -> None:
    endpoint, _ = hub
    result = run(["-m", "render_service.cli", "serve", "acme/no-such-model"], hub_env(tmp_path, endpoint=endpoint))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"model 'acme/no-such-model' is neither a local folder nor in the local huggingface cache, and it " \
           f"could not be downloaded from {endpoint}" in result.stderr  # fmt: skip


def test_unreachable_hub_is_a_clear_start_up_error(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on: connection refused
        sock.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{sock.getsockname()[1]}"
    result = run(["-m", "render_service.cli", "serve", REPO_ID], hub_env(tmp_path, endpoint=endpoint))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"model '{REPO_ID}' is neither a local folder" in result.stderr and endpoint in result.stderr
