"""The gateway: OpenAI API in front of `vllm serve --tokens-only` engines (collocated or P/D).

render -> [prefill] -> decode -> derender, with render and derender in-process. Start with
`render-service gateway --engine URL...` or `--prefill URL... --decode URL...`; see cli.py.
"""

from typing import Any

from render_service.gateway.config import GatewayConfig
from render_service.gateway.gateway import Gateway

__all__ = ["GatewayConfig", "Gateway", "create_gateway_app"]


def __getattr__(name: str) -> Any:  # lazy: the app pulls in FastAPI and the render core
    if name == "create_gateway_app":
        from render_service.gateway.app import create_gateway_app

        return create_gateway_app
    raise AttributeError(name)
