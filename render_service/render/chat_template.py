"""Applying a chat template: transformers' `apply_chat_template(tokenize=False)` semantics.

`render_chat_template` reproduces what transformers (5.19, as vLLM 0.33 pins <5.21) does between `apply_chat_template` and
`Template.render` for one conversation: drop None-valued message keys, alias `reasoning` as
`reasoning_content` (as vLLM 0.33 does), pass the special-tokens map under the kwargs, handle
`continue_final_message` with the same tag trick and error messages, and render. It adds the
deadline and output budget of `jinja_env` and turns every failure into `TemplateRenderError`
carrying the message vLLM puts in its 400 (the innermost Jinja error, else `str(exc)`).

Analysis helpers mirror vLLM: `template_variables` (what `resolve_chat_template_kwargs` keeps)
and `detect_content_format` (whether a template iterates over `message.content`, i.e. wants
OpenAI content parts rather than a string).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from functools import lru_cache
from typing import Any, Literal

import jinja2
import jinja2.meta
import jinja2.nodes

from render_service.render.jinja_env import ChatTemplateEnvironment, RenderLimits, render_limits

__all__ = [
    "TemplateRenderError",
    "compile_template",
    "template_variables",
    "detect_content_format",
    "render_chat_template",
    "HF_APPLY_CHAT_TEMPLATE_PARAMS",
]

ContentFormat = Literal["string", "openai"]
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "
# Parameters of transformers' apply_chat_template (vLLM accepts these kwargs for any template).
HF_APPLY_CHAT_TEMPLATE_PARAMS = frozenset(
    {
        "conversation",
        "tools",
        "documents",
        "chat_template",
        "add_generation_prompt",
        "continue_final_message",
        "tokenize",
        "sanitize_control_tokens",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
    }
)
# apply_chat_template consumes these itself; they never reach the template.
_CONSUMED_PARAMS = HF_APPLY_CHAT_TEMPLATE_PARAMS - {"tools", "documents", "add_generation_prompt"}

_environment = ChatTemplateEnvironment()
# Analysis only (never renders): no loop guards, same syntax and extensions.
_analysis_environment = ChatTemplateEnvironment()


class TemplateRenderError(Exception):
    """A chat template failed to compile, raised, or broke a limit (a 400 in vLLM)."""


@lru_cache(maxsize=64)
def compile_template(source: str) -> jinja2.Template:
    """Compile once per distinct template text (bounded: requests may carry templates)."""
    try:
        return _environment.from_string(source)
    except jinja2.TemplateError as exc:
        raise TemplateRenderError(str(exc)) from exc


@lru_cache(maxsize=64)
def _parse(source: str) -> jinja2.nodes.Template | None:
    try:
        return _analysis_environment.parse(source)
    except jinja2.TemplateError:
        return None


@lru_cache(maxsize=64)
def template_variables(source: str) -> frozenset[str]:
    """Undeclared variables of the template (the kwargs it can read)."""
    ast = _parse(source)
    return frozenset(jinja2.meta.find_undeclared_variables(ast)) if ast is not None else frozenset()


def render_chat_template(
    source: str,
    conversation: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None,
    documents: list[dict[str, Any]] | None,
    add_generation_prompt: bool,
    continue_final_message: bool | str,
    special_tokens_map: dict[str, Any],
    template_kwargs: dict[str, Any],
    limits: RenderLimits,
) -> str:
    """Render `conversation` as transformers' apply_chat_template(tokenize=False) would.

    Raises:
        TemplateRenderError: compile error, template exception, limit exceeded, or a
            `continue_final_message` the template cannot honour.
    """
    template = compile_template(source)
    kwargs = {k: v for k, v in template_kwargs.items() if k not in _CONSUMED_PARAMS}
    context = {**special_tokens_map, **kwargs}
    chat = _alias_reasoning_fields(
        [{k: v for k, v in message.items() if v is not None} for message in conversation]
    )
    token = render_limits.set(limits)
    try:
        if not chat:  # transformers' apply_chat_template check, so vLLM's message
            raise ValueError("Cannot apply chat template to an empty conversation. Provide at least one message.")
        if continue_final_message and add_generation_prompt:
            raise ValueError(
                "continue_final_message and add_generation_prompt are not compatible. Use "
                "continue_final_message when you want the model to continue the final message, "
                "and add_generation_prompt when you want to add a header that will prompt it to "
                "start a new assistant message instead."
            )
        final = _tag_final_message(chat, continue_final_message, source)
        rendered = _generate(template, chat, tools, documents, add_generation_prompt, context)
        if final is not None:
            rendered = _cut_at_continue_tag(rendered, final)
        return rendered
    except TemplateRenderError:
        raise
    except (Exception, RecursionError) as exc:  # noqa: BLE001 - vLLM maps any template failure to 400
        raise TemplateRenderError(_error_reason(exc)) from exc
    finally:
        render_limits.reset(token)


def _generate(
    template: jinja2.Template,
    chat: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    documents: list[dict[str, Any]] | None,
    add_generation_prompt: bool,
    context: dict[str, Any],
) -> str:
    limits = render_limits.get()
    context = {
        **context,
        "messages": chat,
        "tools": tools,
        "documents": documents,
        "add_generation_prompt": add_generation_prompt,
    }
    chunks: list[str] = []
    size = 0
    for chunk in template.generate(context):
        size += len(chunk)
        limits.check_size(size)
        chunks.append(chunk)
    limits.check_time()
    return "".join(chunks)


def _alias_reasoning_fields(chat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """vLLM 0.33's compatibility alias: `reasoning` is also `reasoning_content`. Nothing
    else: transformers 5.21+ also fills `thinking`, which vLLM 0.33 (transformers <5.21)
    never passes, and templates that read it (LFM2.5-VL) would render past reasoning."""
    out = []
    for message in chat:
        reasoning = message.get("reasoning")
        if reasoning is not None and message.get("reasoning_content") is None:
            message = {**message, "reasoning_content": reasoning}
        out.append(message)
    return out


def _tag_final_message(
    chat: list[dict[str, Any]], continue_final_message: bool | str, source: str
) -> str | None:
    """Append transformers' continue tag to the final message; return the text to continue."""
    if not continue_final_message:
        return None
    if not chat:
        raise ValueError("continue_final_message is set but the conversation is empty!")
    field = continue_final_message if isinstance(continue_final_message, str) else "content"
    final_message = chat[-1].get(field)
    if final_message is None:
        raise ValueError(
            f'continue_final_message is set but the final message has no "{field}" to continue!'
        )
    fields = [field]
    if not any(f in source for f in fields):
        raise ValueError(
            f'continue_final_message is set to "{field}" but this is not an accepted field in '
            "the chat_template"
        )
    if isinstance(final_message, (list, tuple)):
        return _tag_last_text_block(chat, field)
    for f in fields:
        chat[-1][f] = chat[-1][f] + _CONTINUE_TAG
    tagged: str | None = final_message
    return tagged


def _tag_last_text_block(chat: list[dict[str, Any]], field: str) -> str:
    blocks = [dict(block) for block in chat[-1][field]]
    chat[-1] = {**chat[-1], field: blocks}
    for block in reversed(blocks):
        if "text" in block:
            final: str = block["text"]
            block["text"] = block["text"] + _CONTINUE_TAG
            return final
    raise ValueError(
        "continue_final_message is set but we could not find any text to continue in the "
        "final message!"
    )


def _cut_at_continue_tag(rendered: str, final_message: str) -> str:
    tag = _CONTINUE_TAG.strip()
    if final_message.strip() not in rendered or tag not in rendered:
        raise ValueError(
            "continue_final_message is set but the final message does not appear in the chat "
            "after applying the chat template! This can happen if the chat template deletes "
            "portions of the final message. Please verify the chat template and final message "
            "in your chat to ensure they are compatible."
            f"Final message to continue: {final_message.strip()}\nRendered chat:\n{rendered}"
        )
    at = rendered.rindex(tag)
    if rendered[at : at + len(_CONTINUE_TAG)] == _CONTINUE_TAG:
        return rendered[:at]
    return rendered[:at].rstrip()


def _error_reason(exc: BaseException) -> str:
    """The most specific reason in an exception chain: the first Jinja error, else str(exc)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, jinja2.TemplateError):
            return str(current)
        current = current.__cause__ or current.__context__
    return str(exc)


# -- content format detection (vLLM `_detect_content_format`) ------------------------------


@lru_cache(maxsize=64)
def detect_content_format(source: str) -> ContentFormat:
    """"openai" if the template loops over a message's content, else "string"."""
    ast = _parse(source)
    if ast is None:
        return "string"
    return "openai" if any(True for _ in _content_loops(ast)) else "string"


def _is_var(node: jinja2.nodes.Node, name: str) -> bool:
    if isinstance(node, jinja2.nodes.Name):
        return node.ctx == "load" and node.name == name
    if isinstance(node, jinja2.nodes.Getattr) and "." in name:
        base, _, attr = name.rpartition(".")
        return node.attr == attr and _is_var(node.node, base)
    return False


def _is_item(node: jinja2.nodes.Node, name: str, key: str) -> bool:
    if isinstance(node, jinja2.nodes.Getitem):
        return (
            _is_var(node.node, name)
            and isinstance(node.arg, jinja2.nodes.Const)
            and node.arg.value == key
        )
    if isinstance(node, jinja2.nodes.Getattr):
        return _is_var(node.node, name) and node.attr == key
    return False


def _refers_to(node: jinja2.nodes.Node, name: str, key: str | None = None) -> bool:
    """`name` (or `name.key`), possibly through filters, tests or slices."""
    if isinstance(node, jinja2.nodes.Filter):
        return node.node is not None and _refers_to(node.node, name, key)
    if isinstance(node, jinja2.nodes.Test):
        return _refers_to(node.node, name, key)
    if isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
        return _refers_to(node.node, name, key)
    return _is_item(node, name, key) if key else _is_var(node, name)


def _dotted(node: jinja2.nodes.Node) -> str | None:
    if isinstance(node, jinja2.nodes.NSRef):
        return f"{node.name}.{node.attr}"
    parts = []
    while isinstance(node, jinja2.nodes.Getattr):
        parts.append(node.attr)
        node = node.node
    if isinstance(node, jinja2.nodes.Name):
        parts.append(node.name)
        return ".".join(reversed(parts))
    return None


def _aliases_of(root: jinja2.nodes.Template, name: str) -> Iterator[str]:
    """`name` and every variable assigned from it (transitively), incl. namespace attributes."""
    yield name
    seen = {name}
    queue = deque([name])
    while queue:
        current = queue.popleft()
        for assign in root.find_all(jinja2.nodes.Assign):
            lhs, rhs = assign.target, assign.node
            found: list[str] = []
            if isinstance(lhs, jinja2.nodes.Name) and _refers_to(rhs, current):
                found.append(lhs.name)
            if (
                isinstance(lhs, jinja2.nodes.Name)
                and isinstance(rhs, jinja2.nodes.Call)
                and isinstance(rhs.node, jinja2.nodes.Name)
                and rhs.node.name == "namespace"
            ):
                found += [f"{lhs.name}.{kw.key}" for kw in rhs.kwargs if _refers_to(kw.value, current)]
            elif isinstance(lhs, (jinja2.nodes.Getattr, jinja2.nodes.NSRef)) and _refers_to(
                rhs, current
            ):
                dotted = _dotted(lhs)
                found += [dotted] if dotted is not None else []
            for alias in found:
                yield alias
                if alias not in seen:
                    seen.add(alias)
                    queue.append(alias)


def _message_loop_targets(root: jinja2.nodes.Template) -> list[str]:
    names = list(_aliases_of(root, "messages"))
    targets = []
    for loop in root.find_all(jinja2.nodes.For):
        if any(_refers_to(loop.iter, name) for name in names) and isinstance(
            loop.target, jinja2.nodes.Name
        ):
            targets.append(loop.target.name)
    return targets


def _macro_content_params(
    root: jinja2.nodes.Template, message_names: list[str]
) -> tuple[dict[int, set[str]], set[int]]:
    """Macro parameters that receive `message.content`, per loop inside each macro."""
    params_by_loop: dict[int, set[str]] = {}
    loops_in_macros: set[int] = set()
    for macro in root.find_all(jinja2.nodes.Macro):
        arg_names = {arg.name for arg in macro.args}
        params: set[str] = set()
        for call in root.find_all(jinja2.nodes.Call):
            if not (isinstance(call.node, jinja2.nodes.Name) and call.node.name == macro.name):
                continue
            for i, arg in enumerate(call.args):
                if i < len(macro.args) and any(_refers_to(arg, m, "content") for m in message_names):
                    params.add(macro.args[i].name)
            for kw in call.kwargs:
                if kw.key in arg_names and any(
                    _refers_to(kw.value, m, "content") for m in message_names
                ):
                    params.add(kw.key)
        for loop in macro.find_all(jinja2.nodes.For):
            loops_in_macros.add(id(loop))
            if params:
                params_by_loop[id(loop)] = params
    return params_by_loop, loops_in_macros


def _content_loops(root: jinja2.nodes.Template) -> Iterator[jinja2.nodes.For]:
    message_names = _message_loop_targets(root)
    params_by_loop, loops_in_macros = _macro_content_params(root, message_names)
    for loop in root.find_all(jinja2.nodes.For):
        if any(_refers_to(loop.iter, m, "content") for m in message_names):
            yield loop
            continue
        name = loop.iter.name if isinstance(loop.iter, jinja2.nodes.Name) else None
        params = params_by_loop.get(id(loop))
        if name is not None and params is not None and name in params:
            yield loop
        elif name is not None and id(loop) not in loops_in_macros and name == "content":
            yield loop
