"""The chat-template sandbox and its limits, through the public Renderer API and over HTTP.

1. Escapes: attribute and call paths to Python internals (`__class__`, `__globals__`,
   `__subclasses__`, `mro`, generator frames, str.format field access, the internals of the
   `cycler` / `joiner` / `namespace` / `lipsum` / `range` globals, file access through
   `include`/`import`) all end in a 400 naming the refusal, or render without reaching them.
2. Time and size: a template that loops "forever" is cut by the render deadline, one that
   emits gigabytes by the output budget; both are 400s with a clear message, and the worker
   serves the next request.
3. Per-request templates (`chat_template`, `chat_template_kwargs.chat_template`) are refused
   unless the server runs with --trust-request-chat-template.
4. Amplifiers: single steps that build a huge string or integer without emitting it (filters,
   str methods, concatenation doubling, big-int powers). With a small budget these must be
   refused too.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from render_service.api import Renderer
from render_service.errors import BadRequestError

from .reliability_support import service_config

USER = [{"role": "user", "content": "hi"}]
# Output markers a successful escape would leak into the prompt.
LEAK_MARKERS = ("<class", "<function", "<module", "<built-in", "<bound method", "root:x:", "__builtins__", "<frame")

ESCAPES = {
    "str-class-mro-subclasses": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "str-class-mro-call": "{{ ''.__class__.mro() }}",
    "tuple-bases": "{{ ().__class__.__bases__[0].__subclasses__() }}",
    "attr-filter-class": "{{ ''|attr('__class__') }}",
    "attr-filter-globals": "{{ cycler|attr('__init__')|attr('__globals__') }}",
    "cycler-init-globals": "{{ cycler.__init__.__globals__ }}",
    "cycler-instance-globals": "{{ cycler(1, 2).__init__.__globals__ }}",
    "cycler-next-func": "{{ cycler(1, 2).next.__func__.__globals__ }}",
    "joiner-call-globals": "{{ joiner().__call__.__globals__ }}",
    "namespace-init-globals": "{{ namespace.__init__.__globals__ }}",
    "namespace-underscore-kwarg": "{{ namespace(_secret=1) }}",
    "namespace-underscore-set": "{% set ns = namespace() %}{% set ns.__class__ = 1 %}{{ ns }}",
    "lipsum-globals": "{{ lipsum.__globals__['os'] }}",
    "range-self": "{{ range.__self__ }}",
    "range-globals": "{{ range.__globals__ }}",
    "dict-global-internals": "{{ dict.__call__.__globals__ }}",
    "dict-fromkeys-self": "{{ dict.fromkeys.__self__ }}",
    "raise-exception-globals": "{{ raise_exception.__globals__ }}",
    "strftime-globals": "{{ strftime_now.__globals__ }}",
    "messages-class": "{{ messages.__class__.__base__.__subclasses__() }}",
    "message-items-self": "{{ messages[0].items.__self__.__class__ }}",
    "loop-internals": "{% for m in messages %}{{ loop.__class__.__init__.__globals__ }}{% endfor %}",
    "generator-frame": "{{ (range(3)|map('string')).gi_frame.f_globals }}",
    "generator-code": "{{ (range(3)|map('string')).gi_code }}",
    "self-reference": "{{ self.__init__.__globals__ }}",
    "self-context": "{{ self._TemplateReference__context }}",
    "format-attr": "{{ '{0.__class__}'.format(1) }}",
    "format-globals": "{{ '{0.__init__.__globals__}'.format(cycler) }}",
    "format-map": "{{ '{x.__class__}'.format_map({'x': 1}) }}",
    "format-filter-repr": "{{ '%r'|format(cycler.__init__) }}",
    "list-mutation": "{{ messages.append({'role': 'system', 'content': 'pwned'}) }}{{ messages|length }}",
    "dict-mutation": "{{ messages[0].update({'content': 'pwned'}) }}{{ messages[0].content }}",
    "include-file": "{% include '/etc/passwd' %}",
    "import-module": "{% import 'os' as os %}{{ os }}",
    "extends-file": "{% extends '/etc/passwd' %}",
    "int-internals": "{{ (1).__class__.__subclasses__() }}",
    "func-code": "{{ raise_exception.__code__.co_consts }}",
}


@pytest.fixture(scope="module")
def trusted(bundle) -> Renderer:  # noqa: ANN001
    return Renderer(service_config(trust_request_chat_template=True), bundle=bundle)


def _render_text(renderer: Renderer, template: str) -> str:
    ids = renderer.render_chat({"messages": USER, "chat_template": template})["token_ids"]
    return renderer.bundle.hf_tokenizer.decode(ids)


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_sandbox_escape_is_refused(trusted, name: str) -> None:  # noqa: ANN001
    """An escape either fails with a 400 (unsafe access / no loader) or leaks nothing."""
    try:
        text = _render_text(trusted, ESCAPES[name])
    except BadRequestError as exc:
        assert exc.status == 400
        assert not any(marker in exc.message for marker in LEAK_MARKERS[-3:]), exc.message
        return
    assert not any(marker in text for marker in LEAK_MARKERS), text[:300]
    assert "pwned" not in text


@pytest.mark.parametrize("name", ["str-class-mro-subclasses", "format-globals", "cycler-init-globals"])
def test_sandbox_refusal_names_the_unsafe_access(trusted, name: str) -> None:  # noqa: ANN001
    with pytest.raises(BadRequestError, match="unsafe"):
        _render_text(trusted, ESCAPES[name])


def test_request_data_cannot_be_mutated_by_the_template(trusted) -> None:  # noqa: ANN001
    """The immutable sandbox refuses list/dict mutation, so messages reach the prompt intact."""
    with pytest.raises(BadRequestError, match="unsafe"):
        _render_text(trusted, ESCAPES["list-mutation"])


# -- over HTTP: trust flag, time and size limits ------------------------------------------------

LOOP_FOREVER = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
RECURSE_FOREVER = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"
GIGABYTES = "{% for i in range(100000) %}{% for j in range(100000) %}{{ 'x' * 1000 }}{% endfor %}{% endfor %}"
OK_TEMPLATE = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"


@pytest.fixture(scope="module")
def trusted_http(make_app, serve) -> Iterator[httpx.Client]:  # noqa: ANN001
    app = make_app(trust_request_chat_template=True, limits={"render_timeout_s": 2.0, "max_template_output_chars": 1 << 20})
    with httpx.Client(base_url=serve(app).url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def untrusted_http(default_server) -> Iterator[httpx.Client]:  # noqa: ANN001
    with httpx.Client(base_url=default_server.url, timeout=60) as client:
        yield client


def _refused(response: httpx.Response, *needles: str) -> str:
    assert response.status_code == 400, (response.status_code, response.text[:300])
    error = response.json()["error"]
    assert error["type"] == "BadRequestError" and error["code"] == 400
    for needle in needles:
        assert needle in error["message"], error["message"]
    return error["message"]


def _renders(client: httpx.Client, **extra: object) -> None:
    response = client.post("/v1/chat/completions/render", json={"messages": USER, **extra})
    assert response.status_code == 200, response.text[:300]


@pytest.mark.parametrize("path", ["/v1/chat/completions/render", "/tokenize"])
def test_request_template_refused_without_trust_flag(untrusted_http, path: str) -> None:  # noqa: ANN001
    for extra in ({"chat_template": OK_TEMPLATE}, {"chat_template_kwargs": {"chat_template": OK_TEMPLATE}}):
        _refused(untrusted_http.post(path, json={"messages": USER, **extra}), "--trust-request-chat-template")
    _renders(untrusted_http)


def test_request_template_used_with_trust_flag(trusted_http) -> None:  # noqa: ANN001
    response = trusted_http.post("/tokenize", json={"messages": USER, "chat_template": OK_TEMPLATE})
    assert response.status_code == 200
    text = trusted_http.post("/detokenize", json={"tokens": response.json()["tokens"]}).json()["prompt"]
    assert text == "<user>hi"


def test_endless_loop_is_cut_by_the_render_timeout(trusted_http) -> None:  # noqa: ANN001
    started = time.monotonic()
    _refused(trusted_http.post("/v1/chat/completions/render", json={"messages": USER, "chat_template": LOOP_FOREVER}),
             "timed out after 2s")  # fmt: skip
    assert time.monotonic() - started < 60
    _renders(trusted_http)


def test_gigabytes_of_output_are_cut_by_the_output_budget(trusted_http) -> None:  # noqa: ANN001
    _refused(trusted_http.post("/v1/chat/completions/render", json={"messages": USER, "chat_template": GIGABYTES}),
             f"exceeds the limit of {1 << 20} characters")  # fmt: skip
    _renders(trusted_http)


def test_endless_recursion_is_a_400(trusted_http) -> None:  # noqa: ANN001
    _refused(trusted_http.post("/v1/chat/completions/render", json={"messages": USER, "chat_template": RECURSE_FOREVER}))
    _renders(trusted_http)


def test_sandbox_escape_over_http_is_a_400(trusted_http) -> None:  # noqa: ANN001
    body = {"messages": USER, "chat_template": ESCAPES["cycler-init-globals"]}
    _refused(trusted_http.post("/v1/chat/completions/render", json=body), "unsafe")
    _renders(trusted_http)


# -- amplifiers: one step, a huge value, nothing emitted ------------------------------------------

BUDGET = 100_000  # chars; each template below builds ~10x that in one step (safe at this size)
AMPLIFIERS = {
    "repeat-operator": '{% set s = "x" * 1000000 %}{{ s|length }}',
    "percent-width": '{% set s = "%1000000d" % 1 %}{{ s|length }}',
    "center-filter-runtime": '{% set w = 1000000 %}{% set s = "x"|center(w) %}{{ s|length }}',
    "center-filter-constant": '{% set s = "x"|center(1000000) %}{{ s|length }}',
    "format-filter": '{% set s = "%1000000d"|format(1) %}{{ s|length }}',
    "str-format-width": '{% set s = "{:>1000000}".format(1) %}{{ s|length }}',
    "str-ljust": '{% set s = "x".ljust(1000000) %}{{ s|length }}',
    "str-zfill": '{% set s = "1".zfill(1000000) %}{{ s|length }}',
    "str-expandtabs": '{% set s = "a\tb".expandtabs(1000000) %}{{ s|length }}',
    "replace-filter": '{% set s = ("x" * 1000)|replace("x", "y" * 1000) %}{{ s|length }}',
    "replace-method": '{% set s = ("x" * 1000).replace("x", "y" * 1000) %}{{ s|length }}',
    "join-filter": '{% set s = (["x" * 50000] * 20)|join %}{{ s|length }}',
    "join-method": '{% set s = "".join(["x" * 50000] * 20) %}{{ s|length }}',
    "concat-doubling": '{% set ns = namespace(s="x") %}{% for i in range(20) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}',
    "plus-doubling": '{% set ns = namespace(s="x") %}{% for i in range(20) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}',
    "lipsum": "{% set s = lipsum(2000, false) %}{{ s|length }}",
    "tojson-indent": "{% set s = ([[[[1]]]] * 10000)|tojson(indent=100) %}{{ s|length }}",
    "int-power-of-power": "{% set n = (10 ** 4096) ** 300 %}{{ n.bit_length() }}",
}


@pytest.fixture(scope="module")
def small_budget(bundle) -> Renderer:  # noqa: ANN001
    return Renderer(service_config(trust_request_chat_template=True, limits={"max_template_output_chars": BUDGET}),
                    bundle=bundle)  # fmt: skip


@pytest.mark.parametrize("name", sorted(AMPLIFIERS))
def test_one_step_amplifier_is_bounded(small_budget, name: str) -> None:  # noqa: ANN001
    with pytest.raises(BadRequestError, match="exceeds the limit|integer is too large"):
        small_budget.render_chat({"messages": USER, "chat_template": AMPLIFIERS[name]})
