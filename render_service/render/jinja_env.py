"""The chat-template Jinja environment: transformers 5.24's, plus hard resource limits.

What must match `transformers.utils.chat_template_utils._cached_compile_jinja_template`
byte for byte in behaviour: `ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True)`, the `loopcontrols` extension and a `{% generation %}` tag, the `tojson`
filter (json.dumps, no HTML escaping, `ensure_ascii=False`), `raise_exception`,
`strftime_now`, the restricted `dict` and `namespace` globals. Templates are never edited.

What we add, without changing any output a well-behaved template produces:

- a wall-clock deadline. The compiled code of every `{% for %}` iterates through a guard
  (inserted in the *AST* at compile time as a filter the template cannot shadow) that checks
  the deadline on each item, so loops that would run for hours stop. Recursion ends with
  Python's RecursionError, which becomes a template error.
- an output budget: rendered chunks are counted while the template generates them, and every
  way a template can build a huge value in one step is bounded even when nothing is emitted:
  `*`, `**`, `%`, `+` and `~` (concatenation, guarded in the AST like loops), padding and
  replacing str methods (checked before they run), every call's str/list/int result (checked
  after it returns, so a doubling loop stops within one step of the budget), and the
  `replace`, `join`, `center`, `indent`, `format`, `tojson` filters.

The deadline lives in a ContextVar, so concurrent renders in threads do not interfere.
"""

from __future__ import annotations

import contextvars
import json
import re
import time
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["ChatTemplateEnvironment", "RenderLimitError", "RenderLimits", "render_limits"]

_GUARD_FILTER = "__render_service_loop_guard__"
_SIZE_FILTER = "__render_service_size_guard__"
_MAX_POWER_EXPONENT = 4096
# Integers past 2^(2^20) (~315k digits) only come from abuse; arithmetic on them is quadratic.
_MAX_INT_BITS = 1 << 20
# str methods whose result length is set by a numeric argument, and its position.
_PADDING_METHODS = {"ljust": 0, "rjust": 0, "center": 0, "zfill": 0}
# %-format width/precision numbers, e.g. "%100000000d".
# Width/precision digits in a str.format spec, e.g. "{:>100000000}".
_FORMAT_WIDTH = re.compile(r"\{[^{}]*:[^{}]*?(\d+)[^{}]*\}")
_PERCENT_WIDTH = re.compile(r"%[-+ #0]*(\d+|\*)?(?:\.(\d+|\*))?")


class RenderLimitError(jinja2.exceptions.TemplateError):
    """The template exceeded the render deadline or output budget."""


class RenderLimits:
    """Deadline (monotonic seconds) and output budget (chars) of the current render."""

    __slots__ = ("deadline", "max_chars", "timeout_s")

    def __init__(self, timeout_s: float, max_chars: int) -> None:
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.max_chars = max_chars

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise RenderLimitError(
                f"Chat template rendering timed out after {self.timeout_s:g}s. This may "
                "indicate a malicious or excessively complex template."
            )

    def check_size(self, size: int) -> None:
        if size > self.max_chars:
            raise RenderLimitError(
                f"Chat template output exceeds the limit of {self.max_chars} characters."
            )


_UNLIMITED = RenderLimits(float("inf"), 1 << 62)
render_limits: contextvars.ContextVar[RenderLimits] = contextvars.ContextVar(
    "render_limits", default=_UNLIMITED
)


def _loop_guard(iterable: Any) -> Any:
    limits = render_limits.get()
    if limits is _UNLIMITED:
        return iterable
    return _guarded(iterable, limits)


def _guarded(iterable: Any, limits: RenderLimits) -> Any:
    check = limits.check_time
    for item in iterable:
        check()
        yield item


def _check_value(value: Any, limits: RenderLimits) -> Any:
    """Post-check a value a template just built: long strings/lists and huge ints are refused."""
    if isinstance(value, str | list | tuple | dict):
        limits.check_size(len(value))
    elif isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > _MAX_INT_BITS:
            raise RenderLimitError("Chat template integer is too large.")
    return value


def _size_guard(value: Any) -> Any:
    limits = render_limits.get()
    return value if limits is _UNLIMITED else _check_value(value, limits)


def _precheck_str_method(obj: Any, args: tuple[Any, ...], limits: RenderLimits) -> None:
    """Refuse str method calls whose result would blow the budget, before allocating it."""
    name = getattr(obj, "__name__", "")
    target = getattr(obj, "__self__", None)
    if not isinstance(target, str):
        return
    if name in _PADDING_METHODS and args and isinstance(args[0], int):
        limits.check_size(args[0])
    elif name == "expandtabs":
        tabsize = args[0] if args and isinstance(args[0], int) else 8
        limits.check_size(len(target) + target.count("\t") * max(tabsize, 0))
    elif name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        _check_replace(target, args[0], args[1], limits)
    elif name == "join" and args and isinstance(args[0], list | tuple):
        _check_join(target, args[0], limits)


def _check_replace(text: str, old: str, new: str, limits: RenderLimits) -> None:
    hits = text.count(old) if old else len(text) + 1
    limits.check_size(len(text) + hits * len(new))


def _check_join(separator: str, items: list[Any] | tuple[Any, ...], limits: RenderLimits) -> None:
    total = len(separator) * max(len(items) - 1, 0)
    for item in items:
        total += len(item) if isinstance(item, str) else 16
    limits.check_size(total)


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` renders its body (transformers' AssistantTracker
    also records spans for assistant masks, which rendering prompts never asks for)."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_generation_support")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context: jinja2.nodes.EvalContext, caller: Any) -> str:
        body: str = caller()
        return body


def _raise_exception(message: Any) -> None:
    raise jinja2.exceptions.TemplateError(message)


@jinja2.pass_context  # never constant-folded at compile time (before limits apply)
def _tojson(
    _context: Any,
    x: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    if isinstance(indent, int) and indent > 0:
        render_limits.get().check_size(indent * 64)
    checked: str = _size_guard(
        json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )
    )
    return checked


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _TemplateDict:
    """`dict` without attribute access to the real type (transformers' TemplateDict)."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    """Jinja's namespace, refusing underscore-prefixed attributes (transformers 5.24)."""

    def __init__(*args: Any, **kwargs: Any) -> None:
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                "Chat templates cannot store underscore-prefixed attributes on a namespace, "
                f"but got {name!r}. Please rename the attribute."
            )


class ChatTemplateEnvironment(ImmutableSandboxedEnvironment):
    """transformers' chat-template environment with loop deadlines and size checks."""

    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def __init__(self) -> None:
        super().__init__(
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[_GenerationTag, jinja2.ext.loopcontrols],
        )
        self.filters["tojson"] = _tojson
        self.filters["format"] = _checked_format(self.filters["format"])
        self.filters[_GUARD_FILTER] = _loop_guard
        self.filters["center"] = _checked_center(self.filters["center"])
        self.filters["indent"] = _checked_indent(self.filters["indent"])
        self.filters["replace"] = _checked_replace(self.filters["replace"])
        self.filters["join"] = _checked_join(self.filters["join"])
        self.filters[_SIZE_FILTER] = _size_guard
        self.globals["lipsum"] = _checked_lipsum(self.globals["lipsum"])
        self.globals["raise_exception"] = _raise_exception
        self.globals["strftime_now"] = _strftime_now
        self.globals["dict"] = _TemplateDict()
        self.globals["namespace"] = _TemplateNamespace

    def _generate(self, source: jinja2.nodes.Template, *args: Any, **kwargs: Any) -> str:
        # Guard every loop's iterable in the AST that is about to be compiled. `parse()`
        # (used for analysis) is untouched.
        for loop in source.find_all(jinja2.nodes.For):
            loop.iter = jinja2.nodes.Filter(
                loop.iter, _GUARD_FILTER, [], [], None, None, lineno=loop.lineno
            )
        for node in list(source.find_all(jinja2.nodes.Concat)):
            _wrap_in_size_guard(node)
        return super()._generate(source, *args, **kwargs)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        """Every call a template makes: pre-check str methods, post-check what comes back."""
        limits = render_limits.get()
        if limits is not _UNLIMITED:
            _precheck_str_method(__obj, args, limits)
        result = super().call(__context, __obj, *args, **kwargs)
        return result if limits is _UNLIMITED else _check_value(result, limits)

    def format_string(self, s: str, args: Any, kwargs: Any, format_func: Any = None) -> str:
        """str.format / format_map: refuse field widths over the output budget up front."""
        limits = render_limits.get()
        for width in _FORMAT_WIDTH.findall(s):
            limits.check_size(int(width))
        formatted: str = super().format_string(s, args, kwargs, format_func)  # type: ignore[misc]  # untyped in jinja2
        return formatted

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        limits = render_limits.get()
        if operator == "*":
            _check_repeat(left, right, limits)
            _check_repeat(right, left, limits)
        elif operator == "**":
            if isinstance(right, int) and abs(right) > _MAX_POWER_EXPONENT and left not in (
                0,
                1,
                -1,
            ):
                raise RenderLimitError(f"Chat template exponent {right} is too large.")
            _check_int_power(left, right)
        elif operator == "%" and isinstance(left, str):
            _check_percent_format(left, right, limits)
        elif operator == "+" and isinstance(left, str | list | tuple) and type(left) is type(right):
            limits.check_size(len(left) + len(right))
        result = super().call_binop(context, operator, left, right)
        return result if limits is _UNLIMITED else _check_value(result, limits)


def _wrap_in_size_guard(concat: jinja2.nodes.Concat) -> None:
    """Turn `a ~ b` into `(a ~ b)|size_guard` in place (Concat has no parent pointer, so the
    node's own fields are moved into a fresh Concat under a Filter that replaces them)."""
    inner = jinja2.nodes.Concat(concat.nodes, lineno=concat.lineno)
    guard = jinja2.nodes.Filter(inner, _SIZE_FILTER, [], [], None, None, lineno=concat.lineno)
    concat.nodes = [guard]


def _check_int_power(base: Any, exponent: Any) -> None:
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0:
        if base.bit_length() * exponent > _MAX_INT_BITS:
            raise RenderLimitError("Chat template integer is too large.")


def _check_repeat(sequence: Any, count: Any, limits: RenderLimits) -> None:
    if isinstance(sequence, (str, list, tuple)) and isinstance(count, int):
        limits.check_size(len(sequence) * max(count, 0))
    elif isinstance(sequence, int) and isinstance(count, int) and not isinstance(sequence, bool):
        if sequence.bit_length() + count.bit_length() > _MAX_INT_BITS:
            raise RenderLimitError("Chat template integer is too large.")


def _check_percent_format(fmt: str, args: Any, limits: RenderLimits) -> None:
    values = list(args) if isinstance(args, tuple) else [args]
    for match in _PERCENT_WIDTH.finditer(fmt):
        for group in match.groups():
            if group == "*":
                width = values[0] if values and isinstance(values[0], int) else 0
                limits.check_size(abs(width))
            elif group:
                limits.check_size(int(group))


# The checked filters take the context so Jinja cannot constant-fold them at compile time,
# which would run e.g. `'x' | center(10**9)` before any render limit is in force.


def _checked_format(original: Any) -> Any:
    @jinja2.pass_context
    def format(_context: Any, value: Any, *args: Any, **kwargs: Any) -> str:
        if isinstance(value, str):
            _check_percent_format(value, args, render_limits.get())
        result: str = original(value, *args, **kwargs)
        return result

    return format


def _checked_center(original: Any) -> Any:
    @jinja2.pass_context
    def center(_context: Any, value: Any, width: int = 80) -> str:
        if isinstance(width, int):
            render_limits.get().check_size(width)
        result: str = original(value, width)
        return result

    return center


def _checked_indent(original: Any) -> Any:
    @jinja2.pass_context
    def indent(_context: Any, s: Any, width: Any = 4, first: bool = False, blank: bool = False) -> str:
        pad = width if isinstance(width, int) else len(width) if isinstance(width, str) else 0
        render_limits.get().check_size(pad * (str(s).count("\n") + 1))
        result: str = original(s, width, first, blank)
        return result

    return indent


def _checked_replace(original: Any) -> Any:
    @jinja2.pass_eval_context
    def replace(eval_ctx: Any, s: Any, old: Any, new: Any, count: Any = None) -> Any:
        if isinstance(s, str) and isinstance(old, str) and isinstance(new, str):
            _check_replace(s, old, new, render_limits.get())
        return original(eval_ctx, s, old, new, count)

    return replace


def _checked_join(original: Any) -> Any:
    @jinja2.pass_eval_context
    def join(eval_ctx: Any, value: Any, d: str = "", attribute: Any = None) -> Any:
        if attribute is None and isinstance(value, list | tuple) and isinstance(d, str):
            _check_join(d, value, render_limits.get())
        return _size_guard(original(eval_ctx, value, d, attribute))

    return join


# A lorem-ipsum word is at most 12 characters with its separator.
_LIPSUM_WORD_CHARS = 12


def _checked_lipsum(original: Any) -> Any:
    def lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> Any:  # noqa: A002
        if isinstance(n, int) and isinstance(max, int):
            render_limits.get().check_size(n * max * _LIPSUM_WORD_CHARS)
        return original(n, html, min, max)

    return lipsum
