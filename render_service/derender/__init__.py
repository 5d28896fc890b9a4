"""Derender core: engine output (token ids) -> OpenAI chat/completion responses.

Modules, leaves first:
  schemas    request bodies (vLLM 0.33 shapes) and their 400s
  settings   the compact request settings derender reads (carried in stream states)
  stops      stop token drop, batch stop-string cut, streaming stop-string scan
  logprobs   engine logprobs (both wire forms) -> OpenAI logprobs, U+FFFD repair
  decoding   detokenizers per decode mode, batch decode, one streaming text step
  responses  response dicts in vLLM's field order
  assembly   finish_reason resolution, stream delta folding
  state      the per-choice stream state (typed) and its two envelopes (signed, in-process)
  parser_errors  `parsers` errors on engine output -> typed 400s
  parsing    chat parser construction (cached) from server flags + request settings
  bounds     size checks before any work
  context    what every step needs from the server (built once)
  chat_batch, completion_batch    batch derender of each endpoint
  stream     the one stream-step driver, for both endpoints
  stream_kinds  what chat and completion streams do differently (a small strategy each)

`render_service.derender.api.Derenderer` is the public entry point (re-exported as
`render_service.derender_api`); `stream_state` is the signed envelope codec.
"""
