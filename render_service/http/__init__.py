"""The HTTP layer: the render/derender ASGI app and what only HTTP needs.

  app          routes over `Renderer` / `Derenderer` (thin adapters)
  server       `render-service serve` (uvicorn, one or several workers)
  middleware   pure-ASGI API key, body-size and concurrency bounds, request metrics
  bodies       JSON bodies in (vLLM's exact 400s), JSON responses out
  errors       the one mapping of `render_service.errors` to HTTP responses
  openapi      the OpenAPI document
  metrics      the render tier's Prometheus metrics
  media_fetch  http(s) image fetching under the allowlist policy (render itself does no IO)

The gateway (`render_service.gateway`) reuses bodies, errors, middleware and media_fetch.
"""
