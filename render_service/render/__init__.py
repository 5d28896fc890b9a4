"""Render core: OpenAI chat/completion requests -> vLLM `GenerateRequest`s (sans-IO).

Modules, leaves first:
  sampling         SamplingParams JSON exactly as vLLM's msgspec emits it
  prompt_limits    vLLM's prompt-length and max_tokens rules
  request_bounds   O(1) count bounds on a raw body, checked before any IO
  tokenization     fastokens / HF `tokenizers` encoder and the segment cache
  jinja_env        transformers' sandboxed Jinja environment, with our budgets
  chat_template    chat template rendering and content-format detection
  messages         request messages -> the conversation the template sees
  structural_tags, xgrammar_support, parser_support
                   tool-call structural tags and structured-output constraints
  chat_prompt      chat request -> prompt token ids
  generate         validated requests -> GenerateRequest dicts
  api              `Renderer`, the public entry point (re-exported as `render_service.api`)

Nothing here does network IO or imports a web framework (tests/test_layers.py).
"""
