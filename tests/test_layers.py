"""The layer contract of the tree, checked on every import statement (lazy ones included).

    parsers/                  sans-IO; imports nothing of ours and no web or IO library
    render_service.errors     imports nothing of ours
    render_service.config     errors only
    render_service.protocol   errors only (and itself)
    render_service.mm         no render, derender, http, gateway or cli
    render_service.render     no web or IO library; no derender, http, gateway or cli
    render_service.derender   no web or IO library; no render, http, gateway or cli
    render_service.http       no gateway or cli
    render_service.gateway    no cli
    ASGI (fastapi, starlette, uvicorn, gunicorn): only render_service.http and render_service.gateway
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WEB_OR_IO = frozenset({"fastapi", "starlette", "uvicorn", "gunicorn", "httpx", "asyncio", "aiohttp",
                       "requests", "socket", "http", "urllib", "prometheus_client"})
ASGI = frozenset({"fastapi", "starlette", "uvicorn", "gunicorn"})
OURS = "render_service"


def _modules(package: str) -> Iterator[tuple[str, Path]]:
    base = ROOT.joinpath(*package.split("."))
    paths = sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]
    for path in paths:
        yield ".".join(path.relative_to(ROOT).with_suffix("").parts), path


def _imports(path: Path) -> Iterator[str]:
    """Absolute names of everything a module imports (relative imports resolved)."""
    package = ".".join(path.relative_to(ROOT).parent.parts)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                yield ".".join([*parts, node.module] if node.module else parts)
            elif node.module:
                yield node.module


def _within(name: str, prefixes: frozenset[str] | set[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _offenders(package: str, forbidden: set[str] | frozenset[str], allowed: set[str] = frozenset()) -> list[str]:
    found = []
    for module, path in _modules(package):
        for name in _imports(path):
            if _within(name, forbidden) and not _within(name, allowed):
                found.append(f"{module} imports {name}")
    return found


def _ours_except(*allowed: str) -> tuple[set[str], set[str]]:
    return {OURS}, {f"{OURS}.{a}" for a in allowed}


LAYERS = [
    ("parsers", WEB_OR_IO | {OURS}, set()),
    ("render_service.errors", *_ours_except()),
    ("render_service.config", *_ours_except("errors")),
    ("render_service.protocol", *_ours_except("errors", "protocol")),
    ("render_service.mm", {f"{OURS}.{p}" for p in ("render", "derender", "http", "gateway", "cli")}, set()),
    ("render_service.render", WEB_OR_IO | {f"{OURS}.{p}" for p in ("derender", "http", "gateway", "cli")}, set()),
    ("render_service.derender", WEB_OR_IO | {f"{OURS}.{p}" for p in ("render", "http", "gateway", "cli")}, set()),
    ("render_service.http", {f"{OURS}.gateway", f"{OURS}.cli"}, set()),
    ("render_service.gateway", {f"{OURS}.cli"}, set()),
]


@pytest.mark.parametrize("package,forbidden,allowed", LAYERS, ids=[layer[0] for layer in LAYERS])
def test_layer_imports_only_what_lies_below_it(package: str, forbidden: set[str], allowed: set[str]) -> None:
    """Each layer imports nothing above it (and the cores no web or IO library)."""
    assert list(_modules(package)), package
    assert _offenders(package, forbidden, allowed) == []


def test_only_http_and_gateway_use_asgi() -> None:
    """fastapi, starlette, uvicorn and gunicorn appear only in render_service.http and .gateway."""
    found = _offenders("render_service", ASGI)
    outside = [f for f in found if not f.startswith((f"{OURS}.http.", f"{OURS}.gateway."))]
    assert found and outside == []
