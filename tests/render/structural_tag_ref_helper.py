"""Run by the vLLM 0.33 reference venv's Python (not by pytest): vLLM's own render, in process.

stdin: {"models": {name: folder}, "flags": {name: [launch flags]} (optional), "runs": [{"model",
"tool_parser", "reasoning_parser", "strict_level", "launch_parsers" (optional: keep the launch's
parsers), "cases": [[case_id, body, path (optional, default chat render)], ...]}]}; stdout
(last line): {case_id: [status, body]}.

Per model it builds the app `vllm launch render MODEL --tool-call-parser hermes
--enable-auto-tool-choice` serves (`build_app` + `init_render_app_state`, what
`vllm.entrypoints.launchers.render.entry` runs before uvicorn) and posts each body to
/v1/chat/completions/render through httpx's ASGI transport. Per run it swaps the renderer's
parser for `ParserManager.get_parser(...)` called exactly as `OnlineRenderer.__init__` calls
it with that run's --tool-call-parser / --reasoning-parser / --tool-strict-level, so one
process (one ~20 s vLLM import) covers every parser configuration.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

HEADER_ID = "fixed-request-id"


async def build_render_app(model_dir: str, flags: list[str] | None = None) -> Any:
    from vllm import AsyncEngineArgs, envs
    from vllm.config import VllmConfig
    from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.entrypoints.launchers.app import build_app
    from vllm.entrypoints.launchers.render.app_state import init_render_app_state
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = ["--model", model_dir, *(flags if flags is not None else ["--tool-call-parser", "hermes", "--enable-auto-tool-choice"])]
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    validate_parsed_serve_args(args)
    engine_args = AsyncEngineArgs.from_cli_args(args)
    model_config = engine_args.create_model_config()
    model_config.quantization = None  # as the render entrypoint does
    envs.VLLM_CPU_KVCACHE_SPACE = 0
    vllm_config = VllmConfig(
        model_config=model_config,
        logging_config=engine_args.create_logging_config(),
        structured_outputs_config=engine_args.create_structured_outputs_config(),
    )
    app = build_app(args, ("render",))
    await init_render_app_state(vllm_config, app.state, args)
    return app


def use_parsers(app: Any, tool_parser: str, reasoning_parser: str | None, strict_level: str | None) -> None:
    from vllm.parser.parser_manager import ParserManager

    renderer = app.state.online_renderer
    renderer.parser = ParserManager.get_parser(
        tool_parser_name=tool_parser,
        reasoning_parser_name=reasoning_parser,
        enable_auto_tools=renderer.enable_auto_tools,
        tool_strict_level=strict_level,
        model_name=renderer.model_config.model,
        is_harmony=renderer.use_harmony,
        tokenizer=renderer.renderer.tokenizer,
    )


async def run(payload: dict[str, Any]) -> dict[str, Any]:
    import httpx

    started = time.monotonic()
    flags = payload.get("flags") or {}
    apps = {name: await build_render_app(folder, flags.get(name)) for name, folder in payload["models"].items()}
    built = time.monotonic()
    results: dict[str, Any] = {}
    for spec in payload["runs"]:
        app = apps[spec["model"]]
        if not spec.get("launch_parsers"):  # else: the parsers the launch flags gave
            use_parsers(app, spec["tool_parser"], spec["reasoning_parser"], spec["strict_level"])
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://ref") as client:
            for case_id, body, *path in spec["cases"]:
                response = await client.post(
                    path[0] if path else "/v1/chat/completions/render", json=body,
                    headers={"X-Request-Id": HEADER_ID},
                )
                results[case_id] = [response.status_code, response.json()]
    done = time.monotonic()
    print(f"apps built in {built - started:.1f} s, {len(results)} renders in {done - built:.1f} s", file=sys.stderr)
    return results


def main() -> None:
    payload = json.load(sys.stdin)
    results = asyncio.run(run(payload))
    sys.stdout.write("\n" + json.dumps(results) + "\n")


if __name__ == "__main__":
    main()
