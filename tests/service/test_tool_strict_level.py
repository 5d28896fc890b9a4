"""`--tool-strict-level` (vLLM's name, values and default): flag -> config -> worker JSON.

What each level does to a render is proven against vLLM 0.33 itself in
tests/render/test_structural_tags_vllm_differential.py.
"""

from __future__ import annotations

import pytest

from render_service.cli import build_parser, config_from_args, main
from render_service.config import ServiceConfig, config_from_json, config_to_json
from render_service.errors import ConfigError


def parse(*argv: str) -> ServiceConfig:
    return config_from_args(build_parser().parse_args(["serve", *argv]))


def test_unset_means_the_parser_default() -> None:
    """Like vLLM, no flag leaves the level to the tool parser (None, not "auto")."""
    assert parse().tool_strict_level is None


@pytest.mark.parametrize("level", ["auto", "function", "parameter"])
def test_each_vllm_level_reaches_the_config_and_the_workers(level: str) -> None:
    config = parse("--tool-strict-level", level)
    assert config.tool_strict_level == level
    assert config_from_json(config_to_json(config)).tool_strict_level == level


def test_environment_variable_sets_the_level(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RENDER_SERVICE_TOOL_STRICT_LEVEL", "function")
    assert parse().tool_strict_level == "function"


def test_unknown_level_on_the_command_line_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM's argparse offers exactly auto, function, parameter; so does ours."""
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["serve", "--tool-strict-level", "strict"])
    assert exc.value.code == 2
    assert "invalid choice: 'strict'" in capsys.readouterr().err


def test_unknown_level_from_the_environment_fails_at_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RENDER_SERVICE_TOOL_STRICT_LEVEL", "FUNCTION")
    assert main(["serve"]) == 2
    assert "--tool-strict-level 'FUNCTION': choose from auto, function, parameter" in capsys.readouterr().err


def test_config_refuses_an_unknown_level() -> None:
    with pytest.raises(ConfigError, match="--tool-strict-level"):
        ServiceConfig(tool_strict_level="envelope")
