"""Pythonic tool calls: `[get_weather(city='Paris'), search(query="x")]` (Llama 3.2/4, ToolACE).

vLLM 0.33 (`PythonicToolParser`; `Llama4PythonicToolParser` for `llama4_pythonic`) batch
semantics, reproduced for every output vLLM returns calls for:

* the *whole* output must match vLLM's TOOL_CALL_REGEX at its start and parse (`ast.parse`)
  as a module whose first statement is a list of calls; otherwise the whole output is
  content. The regex asks that the output start with `[`, a name (`[a-zA-Z]\\w*`) and `(`,
  and that the first call's arguments start with `)` or `name=`;
* a call's name is a name or dotted name; keyword values must be literals (constants,
  dicts with constant keys, lists/tuples/sets, placeholder-free f-strings, `null`/`true`/
  `false`, signed numbers); arguments are `json.dumps({kw: value}, ensure_ascii=False)`;
  positional arguments are ignored; content is None when calls are returned; what follows
  the list is dropped when it keeps the module valid Python (a newline, a comment, `;`...);
* llama4_pythonic first strips a leading `<|python_start|>` and removes every
  `<|python_end|>` (and then returns that stripped text as content on failure).

Streaming: an output that cannot be a call list streams as content from its first
characters (a `[` and the start of a name are held while they may become `[name(`). A call
is committed (its id and name sent) at its first argument fragment: `[name(` has been read
and its arguments' reader (`_python_args.PythonArgs`) has written JSON, which it does as soon
as a value's first token is known to be a literal; the arguments then stream as they are
read. Before that, anything vLLM would refuse (a positional first argument, a first value
that is not a literal, the output ending) makes the whole output content, as in vLLM. Between
calls the separators and the next name are held; text after the list is held to the end of
the output (bounded by the tool-call limit) and dropped if Python would accept it there, as
vLLM does.

Divergences from vLLM's batch (stream == our batch instead; vLLM would make all output
content, taking back calls already streamed; tests name each):
* `broken_call_list`: the text stops being a valid call list after a call was committed (a
  syntax error, a value that is not a literal, a positional argument after a keyword, a
  malformed call between calls, the output cut inside the list). The calls sent stay; the
  broken call's JSON is closed as written (open strings, arrays and objects closed, never a
  dangling key); all model text not represented in the sent arguments, from there to the
  end, is content.
* `text_after_list`: text after the list that Python refuses there (prose, say) is content
  and the calls stay.
* `regex_after_commit`: the list parses but vLLM's regex refuses it for a reason past the
  first call's head (a trailing comma after the last call, `[f(), g(1)]`): the calls stay.
* `repeated_key`: a keyword or dict key given twice is written twice (`_python_args`).
"""

from __future__ import annotations

import ast
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, cast

import regex

from parsers._errors import StateError
from parsers._state import JsonState
from parsers.tools._machine import (
    EOS,
    MAX_NAME_CHARS,
    TEXT,
    CallState,
    Run,
    Step,
    Table,
    TableToolParser,
    ToolStreamState,
    nothing,
    to_content,
)
from parsers.tools._python_args import (
    ArgsState,
    Kind,
    Lexer,
    LexState,
    PythonArgs,
    Token,
    is_python_keyword,
    normalize_name,
)

__all__ = [
    "PythonicToolParser",
    "Llama4PythonicToolParser",
    "PythonicCallsBase",
    "P",
    "PythonicState",
    "PYTHON_START",
    "PYTHON_END",
]

PYTHON_START, PYTHON_END = "<|python_start|>", "<|python_end|>"
# The start vLLM's TOOL_CALL_REGEX requires (its `\\w` is the regex module's): `[`, a name,
# `(`, then `)` or the first keyword and its `=`. Matched with partial=True while it grows.
HEAD = regex.compile(r"\[([a-zA-Z]\w*)\((?:\)|[a-zA-Z]\w*=)")
# `[`, a name, `(`, a keyword and `=`: a longer head is no call vLLM would take either.
MAX_HEAD_CHARS = 2 * MAX_NAME_CHARS + 3


class P(enum.StrEnum):
    """Phases of the pythonic families (each table lists the ones it uses)."""

    START = "start"  # llama4: the very start, where <|python_start|> is stripped
    LEAD = "lead"  # deciding whether the output is a call list (its head is held)
    CONTENT = "content"  # olmo3: content before a <function_calls> block
    BLOCK = "block"  # olmo3: inside the block, before the first call's head
    ARGS = "args"  # a call's arguments, through PythonArgs
    LIST = "list"  # between calls
    TRAILER = "trailer"  # after the list's `]`: held to the end of the output
    AFTER = "after"  # olmo3: after the block, dropped
    VERBATIM = "verbatim"  # content to the end


class Where(enum.StrEnum):
    """Position between calls."""

    CALL_END = "call_end"  # after a call's `)`: `,` or the list's end
    COMMA = "comma"  # after `,`: the next call's name or the list's end
    NAME = "name"  # inside a (dotted) name: `.` or `(`
    DOT = "dot"  # after `.`: a name


@dataclass(frozen=True, slots=True)
class PythonicCall(CallState):
    args: ArgsState | None = None


@dataclass(frozen=True, slots=True)
class ListState(JsonState):
    """The call list around the calls.

    raw:    model text at list level not yet represented in anything sent: the head while it
            is decided, separators and the next call's name, the text after the list (all of
            it is content if the list breaks before the next fragment is sent).
    where:  position between calls; name: the next call's name as read; lex: the lexer.
    marker: llama4: the output started with <|python_start|>; olmo3: inside the block.
    """

    raw: str = ""
    where: Where = Where.CALL_END
    name: str = ""
    lex: LexState = LexState()
    marker: bool = False


@dataclass(frozen=True, slots=True)
class PythonicState(ToolStreamState):
    call: PythonicCall | None = None
    ext: ListState = ListState()


class PythonicCallsBase(TableToolParser):
    """The call-list machine shared by pythonic, llama4_pythonic and olmo3 (module docstring).

    A family sets `table`, `initial_phase`, `args_format` (in line mode for olmo3's line
    joining) and `bracket_list` (the list is closed by a real `]`, not by the end of the
    text)."""

    state_class = PythonicState
    args_format: ClassVar[PythonArgs] = PythonArgs()
    bracket_list: ClassVar[bool] = True

    def check_ext(self, state: ToolStreamState) -> None:
        """A restored state reads a call's arguments exactly in ARGS."""
        call = state.call
        reading = call is not None and call.args is not None
        if (state.phase == P.ARGS) != reading or (call is not None and not reading):
            raise StateError(f"{self.name}: call state contradicts phase {state.phase!r}")

    def held_chars(self, state: ToolStreamState) -> int:
        ext = cast(ListState, state.ext)
        return super().held_chars(state) + len(ext.raw) + len(ext.name) + len(ext.lex.tok)

    # -- the first call's head -------------------------------------------------------------

    def open_head(self, run: Run[PythonicCallsBase], buf: str, start: int) -> str | None:
        """Decide the head of `buf[start:]` (`name(` and `)` or `kw=`, after `buf[:start]`):
        hold it, open the call (returning the argument text to read), or make it content."""
        head = HEAD.match("[" + buf[start:], partial=True)
        if head is not None and head.partial and len(buf) - start <= MAX_HEAD_CHARS:
            run.ext = run.ext.replace(raw=buf)
            return None
        name = _call_name(head.group(1)) if head is not None and not head.partial else None
        if head is None or name is None:
            self.not_a_call_list(run, buf)
            return None
        opened = start + head.end(1) - 1  # the `(` (the pattern's `[` is not in buf[start:])
        run.ext = run.ext.replace(raw=buf[: opened + 1])
        self._open_call(run, name)
        return buf[opened + 1 :]

    def not_a_call_list(self, run: Run[PythonicCallsBase], text: str) -> None:
        run.content(text)
        run.ext = run.ext.replace(raw="")
        run.phase = P.VERBATIM

    def _open_call(self, run: Run[PythonicCallsBase], name: str) -> None:
        run.call = PythonicCall(name=name, args=self.args_format.start(name))
        run.phase = P.ARGS

    # -- arguments --------------------------------------------------------------------------

    def args_text(self, run: Run[PythonicCallsBase], text: str) -> str | None:
        args, out, rest = self.args_format.feed(run.call.args, text)
        self._send(run, out)
        if rest is None:
            run.call = run.call.replace(args=args)
            return None
        if args.broken:
            self.break_list(run, rest)
            return None
        run.call = None
        run.phase = P.LIST
        run.ext = run.ext.replace(where=Where.CALL_END)
        return rest or None

    def args_end(self, run: Run[PythonicCallsBase], tail: str = "") -> None:
        """The text ends inside a call's arguments (`tail`: model text after that end). A
        call not yet committed is not a call: its text is content."""
        args = run.call.args
        if not args.opened:
            self.break_list(run, args.unwritten() + tail)
            return
        args, out = self.args_format.end(args)
        self._send(run, out)
        self.break_list(run, args.raw + tail)

    def _send(self, run: Run[PythonicCallsBase], out: str) -> None:
        if not out:
            return
        if not run.call.started:  # the commit point: the call's first fragment
            run.start_call(run.call.name)
            run.ext = run.ext.replace(raw="")
        run.args(out)

    def break_list(self, run: Run[PythonicCallsBase], content: str) -> None:
        """The list is no call list from here (`broken_call_list`): the calls sent stay, the
        rest of the output is content (all of it, if no call was sent: vLLM's result)."""
        run.content(run.ext.raw + content)
        run.call = None
        run.ext = ListState(marker=run.ext.marker)
        run.phase = P.VERBATIM

    # -- between calls ----------------------------------------------------------------------

    def list_text(self, run: Run[PythonicCallsBase], text: str) -> str | None:
        return self._scan_list(run, text, final=False)

    def _scan_list(self, run: Run[PythonicCallsBase], text: str, *, final: bool) -> str | None:
        line_mode = self.args_format.line_mode
        reader = _ListReader(run.ext, line_mode=line_mode, bracket=self.bracket_list)
        outcome, rest = reader.run(text, final=final)
        run.ext = reader.to_state()
        if outcome is _Outcome.OPEN:
            run.ext = run.ext.replace(name="")
            self._open_call(run, reader.name)
            return rest or None
        if outcome is _Outcome.CLOSE:
            run.ext = run.ext.replace(raw="", lex=LexState())
            self.list_closed(run)
            return rest or None
        if outcome is _Outcome.FAIL:
            self.break_list(run, rest)
        return None

    def list_end(self, run: Run[PythonicCallsBase], tail: str = "") -> None:
        """The text ends between calls: the list is complete after a call (olmo3's list is
        closed by the end of its text), else broken."""
        self._scan_list(run, "", final=True)
        if run.phase != P.LIST:
            return
        if self.bracket_list or run.ext.where not in (Where.CALL_END, Where.COMMA):
            self.break_list(run, tail)
            return
        run.ext = run.ext.replace(raw="", lex=LexState())
        self.list_closed(run)

    def list_closed(self, run: Run[PythonicCallsBase]) -> None:
        run.phase = P.TRAILER

    # -- after the list ---------------------------------------------------------------------

    def trailer_text(self, run: Run[PythonicCallsBase], text: str) -> None:
        run.ext = run.ext.replace(raw=run.ext.raw + text)

    def trailer_end(self, run: Run[PythonicCallsBase], text: str) -> None:
        """vLLM drops what follows the list when the module stays valid Python with the list
        as its first statement; otherwise (`text_after_list`) it is content here."""
        if not _continues_module(run.ext.raw):
            run.content(run.ext.raw)
        run.ext = run.ext.replace(raw="")


def _call_name(raw: str) -> str | None:
    """The first call's name (the head regex matched it): a Python identifier, no keyword."""
    token = Token(Kind.NAME, normalize_name(raw), raw)
    if not raw.isidentifier() or is_python_keyword(token):
        return None
    return token.text


def _continues_module(trailer: str) -> bool:
    """Whether `[...]` followed by `trailer` parses with the list as the first statement (what
    follows a list display parses the same whatever the list holds)."""
    try:
        module = ast.parse("[0]" + trailer)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return isinstance(getattr(module.body[0], "value", None), ast.List)


class _Outcome(enum.Enum):
    MORE = "more"
    OPEN = "open"  # a call's `(`: its arguments follow
    CLOSE = "close"  # the list's `]`
    FAIL = "fail"


class _ListReader:
    """Between calls: `,` then a (dotted) name and `(`, or the list's end (scratch object)."""

    def __init__(self, ext: ListState, *, line_mode: bool, bracket: bool) -> None:
        self.ext = ext
        self.where, self.name, self.raw = ext.where, ext.name, ext.raw
        self.line_mode, self.bracket = line_mode, bracket
        self.lex = ext.lex

    def to_state(self) -> ListState:
        return self.ext.replace(where=self.where, name=self.name, raw=self.raw, lex=self.lex)

    def run(self, text: str, *, final: bool) -> tuple[_Outcome, str]:
        lexer = Lexer(self.lex, text, final=final, line_mode=self.line_mode)
        for token in lexer.tokens():
            outcome = self._token(token)
            if outcome is _Outcome.FAIL:
                return outcome, token.raw + lexer.rest()
            self.raw += token.raw
            if outcome is not _Outcome.MORE:
                self.lex = LexState()
                return outcome, lexer.rest()
        self.lex = lexer.to_state()
        return _Outcome.MORE, ""

    def _token(self, token: Token) -> _Outcome:
        if token.kind is Kind.TRIVIA:
            return _Outcome.MORE
        op = token.text if token.kind is Kind.OP else None
        if self.where is Where.CALL_END and op == ",":
            self.where = Where.COMMA
            return _Outcome.MORE
        if self.where in (Where.CALL_END, Where.COMMA) and op == "]" and self.bracket:
            return _Outcome.CLOSE
        if self.where in (Where.COMMA, Where.DOT) and token.kind is Kind.NAME:
            return self._name_part(token)
        if self.where is Where.NAME and op == ".":
            self.where = Where.DOT
            return _Outcome.MORE
        if self.where is Where.NAME and op == "(":
            self.where = Where.CALL_END
            return _Outcome.OPEN
        return _Outcome.FAIL

    def _name_part(self, token: Token) -> _Outcome:
        name = token.text if self.where is Where.COMMA else f"{self.name}.{token.text}"
        if is_python_keyword(token) or len(name) > MAX_NAME_CHARS:
            return _Outcome.FAIL
        self.name, self.where = name, Where.NAME
        return _Outcome.MORE


# -- the pythonic and llama4_pythonic families ---------------------------------------------------


def _act(method: str) -> Callable[[Run, str], str | None]:
    return lambda run, text: getattr(run.parser, method)(run, text)


class PythonicToolParser(PythonicCallsBase):
    name: ClassVar[str] = "pythonic"
    initial_phase: ClassVar[str] = P.LEAD

    def lead_text(self, run: Run[PythonicCallsBase], text: str) -> str | None:
        buf = run.ext.raw + text
        if not buf.startswith("["):  # vLLM's regex matches at the very start
            self.not_a_call_list(run, buf)
            return None
        return self.open_head(run, buf, 1)

    def lead_end(self, run: Run[PythonicCallsBase], text: str) -> None:
        if run.ext.raw:
            self.not_a_call_list(run, run.ext.raw)

    def args_eos(self, run: Run[PythonicCallsBase], text: str) -> None:
        self.args_end(run)

    def list_eos(self, run: Run[PythonicCallsBase], text: str) -> None:
        self.list_end(run)


class Llama4PythonicToolParser(PythonicToolParser):
    name: ClassVar[str] = "llama4_pythonic"
    initial_phase: ClassVar[str] = P.START

    def start_marker(self, run: Run[PythonicCallsBase], marker: str) -> None:
        run.ext = run.ext.replace(marker=True)
        run.phase = P.LEAD

    def start_text(self, run: Run[PythonicCallsBase], text: str) -> str:
        run.phase = P.LEAD
        return text

    def end_marker(self, run: Run[PythonicCallsBase], marker: str) -> str | None:
        """vLLM removes every <|python_end|> of an output that starts with
        <|python_start|>; in any other output it is text."""
        if run.ext.marker:
            return None
        return self.table.lookup(run.phase, TEXT).action(run, marker)


def _pythonic_table(*, llama4: bool) -> Table:
    steps = {
        (P.LEAD, TEXT): Step(_act("lead_text")),
        (P.LEAD, EOS): Step(_act("lead_end")),
        (P.ARGS, TEXT): Step(_act("args_text")),
        (P.ARGS, EOS): Step(_act("args_eos")),
        (P.LIST, TEXT): Step(_act("list_text")),
        (P.LIST, EOS): Step(_act("list_eos")),
        (P.TRAILER, TEXT): Step(_act("trailer_text")),
        (P.TRAILER, EOS): Step(_act("trailer_end")),
        (P.VERBATIM, TEXT): Step(to_content),
        (P.VERBATIM, EOS): Step(nothing),
    }
    phases = {phase for phase, _ in steps}
    if not llama4:
        return Table(phases, (), steps)
    steps |= {
        (P.START, PYTHON_START): Step(_act("start_marker")),
        (P.START, TEXT): Step(_act("start_text")),
        (P.START, EOS): Step(nothing),
    }
    phases.add(P.START)
    steps |= {(phase, PYTHON_END): Step(_act("end_marker")) for phase in phases}
    return Table(phases, (PYTHON_START, PYTHON_END), steps)


PythonicToolParser.table = _pythonic_table(llama4=False)
Llama4PythonicToolParser.table = _pythonic_table(llama4=True)
