"""A `vllm launch render` 0.33 command line starts `render-service serve` unchanged.

vLLM's own parser (`make_arg_parser`, in the reference venv, one subprocess) lists every option
it defines with one value it accepts; ours must accept the same argv. Then the flags' meaning:
vLLM's switch pairs, --model, the no-effect warning, and the HTTP options handed to uvicorn.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from render_service.cli import build_parser, config_from_args, main, no_effect_flags
from render_service.config import HttpOptions, config_from_json, config_to_json
from render_service.vllm_flags import VLLM_RENDER_OPTIONS
from tests.render.ref_server import ref_venv

# Runs in the ref venv: each option of vLLM's parser with an argv vLLM accepts.
_LIST_VLLM_OPTIONS = r"""
import argparse, json, sys, tempfile
from vllm.entrypoints.common.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser

parser = make_arg_parser(FlexibleArgumentParser())
config = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
config.write("port: 8000\n")
config.close()

def accepted(argv):
    try:
        parser.parse_args(argv)
        return True
    except (SystemExit, Exception):
        return False

rows = []
for action in parser._actions:
    if not action.option_strings or isinstance(action, argparse._HelpAction):
        continue
    candidates = [[]] if action.nargs == 0 else []
    if action.choices:
        candidates.append([str(next(c for c in action.choices if c is not None))])
    if isinstance(action.default, (int, float, str)) and not isinstance(action.default, bool) \
            and str(action.default) not in ("", argparse.SUPPRESS):
        candidates.append([str(action.default)])
    candidates += [["1"], ["auto"], ["{}"], [config.name], ["x"], ["a=b"]]
    for spelling in action.option_strings:
        argv = next(([spelling, *c] for c in candidates if accepted([spelling, *c])), None)
        rows.append({"spelling": spelling, "nargs": action.nargs, "argv": argv})
print(json.dumps(rows))
"""


@pytest.fixture(scope="module")
def vllm_options() -> list[dict[str, Any]]:
    python = ref_venv() / "bin" / "python"
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([str(python), "-c", _LIST_VLLM_OPTIONS], env=env, capture_output=True, text=True,
                         check=True, timeout=300, cwd="/")
    rows: list[dict[str, Any]] = json.loads(out.stdout.strip().splitlines()[-1])
    return rows


def _parse(*argv: str):  # type: ignore[no-untyped-def]
    return build_parser().parse_args(["serve", *argv])


@pytest.mark.vllm
def test_every_vllm_option_is_accepted(vllm_options: list[dict[str, Any]]) -> None:
    """Each spelling of each vLLM option, with a value vLLM accepts, parses; and our table
    (render_service/vllm_flags.py) names exactly vLLM's options."""
    parser = build_parser()
    refused = []
    assert not [row["spelling"] for row in vllm_options if row["argv"] is None]  # a sample for each
    for row in vllm_options:
        try:
            parser.parse_args(["serve", *row["argv"]])
        except SystemExit:
            refused.append(row["argv"])
    assert not refused
    table = {s for entry in VLLM_RENDER_OPTIONS for s in entry.rstrip("=+?").split(",")}
    assert table == {row["spelling"] for row in vllm_options}


def test_switch_pairs_and_model_option() -> None:
    assert not _parse("--enable-auto-tool-choice", "--disable-auto-tool-choice").enable_auto_tool_choice
    assert not _parse("--trust-remote-code", "--no-trust-remote-code").trust_remote_code
    assert config_from_args(_parse("--enable-prompt-embeds")).enable_prompt_embeds
    assert not config_from_args(_parse("--enable-prompt-embeds", "--disable-prompt-embeds")).enable_prompt_embeds
    assert no_effect_flags(_parse("--enable-prompt-embeds")) == []  # ours now, not a no-effect flag
    assert config_from_args(_parse("--model", "/m", "--tokenizer-mode", "hf")).model == "/m"
    assert config_from_args(_parse("/positional", "--model", "/m")).model == "/positional"


def test_engine_flags_are_accepted_and_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    argv = ["--enforce-eager", "-tp", "2", "--gpu-memory-utilization", "0.9", "--response-role", "bot",
            "--kv-cache-dtype", "fp8", "--cudagraph-capture-sizes", "1", "2"]
    args = _parse(*argv)
    assert no_effect_flags(args) == ["--cudagraph-capture-sizes", "--enforce-eager", "--gpu-memory-utilization",
                                     "--kv-cache-dtype", "--response-role", "--tensor-parallel-size"]
    assert config_from_args(args).model is None  # nothing of them reaches the config
    with caplog.at_level(logging.WARNING, logger="render_service"):
        assert main(["serve", *argv, "--port", "0"]) == 2  # stops at the port check, after the warning
    warnings = [r.getMessage() for r in caplog.records if "no effect on a render tier" in r.getMessage()]
    assert len(warnings) == 1 and "--enforce-eager" in warnings[0] and "--tensor-parallel-size" in warnings[0]


def test_http_flags_reach_uvicorn_and_fastapi(tmp_path: Path) -> None:
    config = config_from_args(_parse(
        "--uvicorn-log-level", "warning", "--disable-uvicorn-access-log", "--ssl-keyfile", "k.pem",
        "--ssl-certfile", "c.pem", "--ssl-ca-certs", "ca.pem", "--ssl-cert-reqs", "2",
        "--ssl-ciphers", "ECDHE", "--root-path", "/api", "--h11-max-incomplete-event-size", "1024",
    ))
    assert config.http == HttpOptions("warning", False, "k.pem", "c.pem", "ca.pem", 2, "ECDHE", "/api", 1024)
    assert config.http.uvicorn_kwargs() == {
        "log_level": "warning", "access_log": False, "ssl_keyfile": "k.pem", "ssl_certfile": "c.pem",
        "ssl_ca_certs": "ca.pem", "ssl_cert_reqs": 2, "h11_max_incomplete_event_size": 1024, "ssl_ciphers": "ECDHE",
    }
    assert config_from_json(config_to_json(config)) == config  # workers get the same options


def test_help_shows_defaults_parser_names_and_ports(capsys: pytest.CaptureFixture[str]) -> None:
    from parsers import registry

    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default: 127.0.0.1" in text and "(default: 8000)" in text and "default: auto" in text
    assert all(name in text for name in registry.tool_parser_names())
    assert all(name in text for name in registry.reasoning_parser_names())
    assert "--enforce-eager" not in text  # accepted, not advertised
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--version"])
    assert exc.value.code == 0
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    assert "default port 8000" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("flag", ["--config", "--tool-parser-plugin", "--reasoning-parser-plugin",
                                  "--hf-overrides", "--override-generation-config"])
def test_flags_we_cannot_honour_are_refused_not_ignored(flag: str) -> None:
    from render_service.errors import ConfigError

    with pytest.raises(ConfigError, match=flag):
        config_from_args(_parse(flag, "x.yaml"))
    config_from_args(_parse(flag, ""))  # vLLM's defaults (empty) are fine
    config_from_args(_parse(flag, "{}"))
