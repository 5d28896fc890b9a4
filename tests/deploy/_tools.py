"""Paths of the repository and of the deploy tools, and chart rendering through the real Helm.

Helm: `helm_python` (PyPI helm-python-sdk) is Helm's own Go SDK (v4) compiled into a C library;
Chart.render runs helm's engine.Render with the values coalesced the way `helm template` does
(chartutil.ToRenderValues, default capabilities, no cluster, so `lookup` returns nothing).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import helm_python
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "render-service"
CI_VALUES = CHART / "ci"
VALUE_SETS = ("default", "pd", "sidecar")
RELEASE, NAMESPACE = "rs", "llm"


def tool(name: str) -> str:
    """A CLI installed by the test extra: next to this Python first, then on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    assert found, f"{name} is not installed: `pip install -e '.[test]'` installs it"
    return found


def ci_values(value_set: str) -> dict[str, Any]:
    return yaml.safe_load((CI_VALUES / f"{value_set}-values.yaml").read_text()) or {}


def render_files(values: dict[str, Any]) -> dict[str, str]:
    """Template path -> rendered text, as `helm template rs helm/render-service -n llm`."""
    with helm_python.Chart.load(str(CHART)) as chart:
        return chart.render(values, name=RELEASE, namespace=NAMESPACE)


def manifests(files: dict[str, str]) -> list[dict[str, Any]]:
    docs = []
    for path, text in sorted(files.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    return manifests(render_files(values))


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def render_service_containers(deployment: dict[str, Any]) -> list[dict[str, Any]]:
    """Containers of a Deployment that run our image (not an engine next to it)."""
    return [
        c for c in deployment["spec"]["template"]["spec"]["containers"]
        if c["image"].split(":")[0].endswith("render-service")
    ]
