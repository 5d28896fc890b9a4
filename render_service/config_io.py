"""ServiceConfig <-> JSON, for handing one config to every worker process."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from render_service.config import Limits, ServiceConfig

__all__ = ["config_to_json", "config_from_json"]


def config_to_json(config: ServiceConfig) -> str:
    return json.dumps(dataclasses.asdict(config))


def config_from_json(raw: str) -> ServiceConfig:
    data: dict[str, Any] = json.loads(raw)
    data["limits"] = Limits(**data.get("limits", {}))
    for name in ("served_model_name", "allowed_media_domains"):  # JSON has no tuples
        data[name] = tuple(data.get(name, ()))
    return ServiceConfig(**data)
