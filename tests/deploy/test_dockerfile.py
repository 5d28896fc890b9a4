"""The Dockerfile: hadolint and shellcheck clean, the image shape the issue asks for
(slim CPU base, builder stage, non-root, no compiler, health check on /health, entry point,
offline hub), the build context, and the entry point's argument handling."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ._dockerfile import DOCKERFILE, context_files, copy_sources, dockerignored, env_of, stages
from ._tools import ROOT, tool

ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
COMPILERS = ("gcc", "g++", "clang", "build-essential", "cc ", "make ")


def test_hadolint_finds_nothing() -> None:
    result = subprocess.run(
        [tool("hadolint"), "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
        capture_output=True, text=True, timeout=60,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_hadolint_can_fail() -> None:
    bad = "FROM python:3.11-slim\nRUN apt-get install gcc\n"
    result = subprocess.run([tool("hadolint"), "--no-color", "-"], input=bad,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "DL3008" in result.stdout


def test_shellcheck_finds_nothing_in_the_image_scripts() -> None:
    scripts = sorted((ROOT / "docker").glob("*.sh"))
    assert [s.name for s in scripts] == ["entrypoint.sh", "install.sh"]
    result = subprocess.run([tool("shellcheck"), "--shell=sh", *map(str, scripts)],
                            capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout) == (0, "")


def test_final_image_is_slim_non_root_and_without_compilers() -> None:
    _, (builder, final) = stages()
    assert builder.name == "builder"
    assert final.base == "python:3.11-slim" == builder.base
    # The final stage takes the venv from the builder and nothing of the build tree.
    copies = [copy_sources(c) for c in final.all("COPY")]
    assert [(s, d) for s, d, f in copies if f.get("from") == "builder"] == [
        (["/opt/render-service"], "/opt/render-service")]
    final_text = " ".join(i.args for i in final.instructions)
    assert not [c for c in COMPILERS if c in final_text + " "]
    assert "apt-get" not in final_text and "pip " not in final_text
    (user,) = final.all("USER")
    uid = user.args.split(":")[0].replace("${UID}", next(i.args.split("=")[1] for i in final.all("ARG")))
    assert uid.isdigit() and int(uid) != 0
    assert final.all("EXPOSE")[0].args == "8000"


def test_runtime_environment() -> None:
    _, (_, final) = stages()
    env = env_of(final)
    assert env["HF_HUB_OFFLINE"] == "1" and env["PYTHONUNBUFFERED"] == "1"
    assert env["RENDER_SERVICE_WORKERS"].isdigit()
    assert (env["RENDER_SERVICE_HOST"], env["RENDER_SERVICE_PORT"]) == ("0.0.0.0", "8000")
    assert env["PATH"].startswith("/opt/render-service/bin:")
    # No model baked in: an empty RENDER_SERVICE_MODEL would not mean "embedded default".
    assert "RENDER_SERVICE_MODEL" not in env


def test_healthcheck_asks_health_with_the_stdlib() -> None:
    _, (_, final) = stages()
    (check,) = final.all("HEALTHCHECK")
    assert "CMD [" in check.args
    command = check.args[check.args.index("["):]
    import json

    argv = json.loads(command)
    assert argv[:2] == ["python", "-c"] and "/health" in argv[2] and "curl" not in command
    compile(argv[2], "<healthcheck>", "exec")


def test_entry_point_is_render_service_serve() -> None:
    _, (_, final) = stages()
    (entry,) = final.all("ENTRYPOINT")
    (cmd,) = final.all("CMD")
    assert entry.exec_form() == ["/usr/local/bin/render-service-entrypoint"]
    assert cmd.exec_form() == ["serve"]
    copies = [copy_sources(c) for c in final.all("COPY")]
    assert (["docker/entrypoint.sh"], "/usr/local/bin/render-service-entrypoint", {"chmod": "0755"}) in copies


def test_build_context_has_what_the_builder_copies_and_nothing_else() -> None:
    _, (builder, _) = stages()
    for ins in builder.all("COPY"):
        sources, _, _ = copy_sources(ins)
        for source in sources:
            if source.endswith("*"):  # optional file (README.md*)
                continue
            assert context_files(source), f"COPY {source}: nothing in the build context"
    for heavy in (".venv/bin/python", ".cache/vllm-ref", ".git/HEAD", "tests/run.sh",
                  "helm/render-service/values.yaml", "render_service/__pycache__/cli.cpython-311.pyc"):
        assert dockerignored(heavy), heavy


# -- docker/entrypoint.sh -------------------------------------------------------------------


@pytest.fixture()
def fake_cli(tmp_path: Path) -> Path:
    """A `render-service` that prints its argv and RENDER_SERVICE_* environment."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "render-service"
    fake.write_text('#!/bin/sh\necho "argv: $*"\nenv | grep "^RENDER_SERVICE_" | sort\n')
    fake.chmod(0o755)
    return bin_dir


def run_entrypoint(bin_dir: Path, args: list[str], env: dict[str, str] | None = None) -> list[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("RENDER_SERVICE_") and k != "MODEL"}
    base["PATH"] = f"{bin_dir}:{base['PATH']}"
    result = subprocess.run(["sh", str(ENTRYPOINT), *args], env={**base, **(env or {})},
                            capture_output=True, text=True, timeout=30, check=True)
    return result.stdout.splitlines()


@pytest.mark.parametrize(("args", "argv"), [
    ([], "serve"),
    (["serve"], "serve"),
    (["--port", "9000"], "serve --port 9000"),
    (["gateway", "--engine", "http://e:8000"], "gateway --engine http://e:8000"),
    (["Qwen/Qwen3-8B"], "serve Qwen/Qwen3-8B"),
])
def test_entrypoint_defaults_to_serve(fake_cli: Path, args: list[str], argv: str) -> None:
    assert run_entrypoint(fake_cli, args)[0] == f"argv: {argv}"


def test_entrypoint_takes_a_model_folder_as_serve_argument(fake_cli: Path, tmp_path: Path) -> None:
    model = tmp_path / "models" / "qwen3"
    model.mkdir(parents=True)
    assert run_entrypoint(fake_cli, [str(model)])[0] == f"argv: serve {model}"


def test_entrypoint_model_alias_and_empty_variables(fake_cli: Path) -> None:
    out = run_entrypoint(fake_cli, [], {"MODEL": "/models/qwen3", "RENDER_SERVICE_REASONING_PARSER": "",
                                        "RENDER_SERVICE_WORKERS": "4"})
    assert out == ["argv: serve", "RENDER_SERVICE_MODEL=/models/qwen3", "RENDER_SERVICE_WORKERS=4"]
    # An explicit RENDER_SERVICE_MODEL wins over the alias; an empty one means the default model.
    out = run_entrypoint(fake_cli, [], {"MODEL": "/a", "RENDER_SERVICE_MODEL": "/b"})
    assert "RENDER_SERVICE_MODEL=/b" in out
    assert run_entrypoint(fake_cli, [], {"RENDER_SERVICE_MODEL": ""}) == ["argv: serve"]


def test_entrypoint_runs_other_commands(fake_cli: Path) -> None:
    assert run_entrypoint(fake_cli, ["echo", "hello"]) == ["hello"]
