"""`render-service serve`: one uvicorn process, or several workers sharing the port.

With `--workers N` the model is loaded once in the parent (a bad folder fails before any fork),
the config travels to the workers as JSON in `CONFIG_ENV`, and prometheus_client's
multiprocess mode aggregates their metrics.
"""

from __future__ import annotations

import os
import tempfile

import uvicorn

from render_service.config import ServiceConfig, config_to_json
from render_service.http.app import CONFIG_ENV, create_app
from render_service.http.startup_log import lean_log_records, log_startup_summary
from render_service.model import ModelBundle

__all__ = ["serve"]


def serve(config: ServiceConfig) -> None:
    """Serve with vLLM's uvicorn options (--uvicorn-log-level, TLS, access log; HttpOptions)."""
    lean_log_records()
    if config.workers == 1:
        app = create_app(config)  # loads the model: a bad folder or template fails here
        log_startup_summary("serve", config, app.state.service.renderer._bundle)
        uvicorn.run(app, host=config.host, port=config.port, **config.http.uvicorn_kwargs())
        return
    bundle = ModelBundle.load(config)  # fail once, in the parent, before forking workers
    log_startup_summary("serve", config, bundle)
    os.environ[CONFIG_ENV] = config_to_json(config)
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="render-service-metrics-"))
    uvicorn.run("render_service.http.app:app_from_env", factory=True, host=config.host, port=config.port,
                workers=config.workers, **config.http.uvicorn_kwargs())
