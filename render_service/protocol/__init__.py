"""Request schemas of vLLM 0.33's render and tokenizer endpoints, and vLLM's 400 error shapes.

One module per request kind, the shared parts below them:

  validation  parse_request / parse_union_request, VLLMValidationError, vLLM's error listing
  content     chat content-part types (what counts as media)
  common      shared field types, the tool models, the fields chat and completion share
              (`SharedRequestFields`, declared once) and the shared "before" validators
  chat        ChatCompletionRequest
  completion  CompletionRequest
  tokenize    TokenizeCompletionRequest, TokenizeChatRequest, DetokenizeRequest

Messages are validated lightly here (a list of objects with a string `role`); their content
is normalised by `render_service.render.messages`. This package imports nothing of ours but
`render_service.errors`: render, derender and the HTTP layer all read it.
"""

from render_service.protocol.chat import ChatCompletionRequest
from render_service.protocol.common import (
    ChatCompletionNamedToolChoiceParam,
    ChatCompletionToolsParam,
    FunctionDefinition,
    SharedRequestFields,
    StreamOptions,
)
from render_service.protocol.completion import CompletionRequest
from render_service.protocol.tokenize import (
    DetokenizeRequest,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
)
from render_service.protocol.validation import (
    RequestValidationError,
    VLLMValidationError,
    parse_request,
    parse_union_request,
    random_uuid,
    request_validation_error,
    sanitize_message,
    vllm_validation_error,
)

__all__ = [
    "ChatCompletionNamedToolChoiceParam",
    "ChatCompletionRequest",
    "ChatCompletionToolsParam",
    "CompletionRequest",
    "DetokenizeRequest",
    "FunctionDefinition",
    "RequestValidationError",
    "SharedRequestFields",
    "StreamOptions",
    "TokenizeChatRequest",
    "TokenizeCompletionRequest",
    "VLLMValidationError",
    "parse_request",
    "parse_union_request",
    "random_uuid",
    "request_validation_error",
    "sanitize_message",
    "vllm_validation_error",
]
