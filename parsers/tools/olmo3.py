"""Olmo 3 tool calls (vLLM 0.33 `olmo3`, `Olmo3PythonicToolParser`): newline-separated pythonic
calls, optionally inside `<function_calls>...</function_calls>`:

    <function_calls>
    get_weather(city="Paris", unit=null)
    search(query="x", exact=true)
    </function_calls>

vLLM's batch: the text of the first `<function_calls>...</function_calls>` block (stripped),
or the whole output when there is none, is cut into lines; the stripped non-blank lines are
joined with ", " and wrapped in `[...]`; that text must match the pythonic TOOL_CALL_REGEX
and parse as a list of calls (`pythonic`'s rules: literals, `null`/`true`/`false`, positional
arguments ignored...). Then the calls are returned and the content is None (text around the
block is dropped); otherwise the whole output is content. The line joining reaches into
string literals too (a line break inside one reads as ", "); `_python_args` applies it as it
reads (line mode).

Streaming, on `pythonic`'s call-list machine (`PythonicCallsBase`): leading whitespace is
held; an output whose first line starts like a call (`name(` and `)` or `kw=`) is read as
bare calls, ended by the end of the output; any other output streams as content until a
`<function_calls>` marker, whose block is read the same way and ended by its closing marker;
what follows the block is dropped. A call commits at its first argument fragment; before
that, a head vLLM would refuse makes the block (or the whole output) content, as vLLM does.

Divergences from vLLM's batch (stream == our batch instead; tests `test_olmo3_*`), besides
`pythonic`'s (`broken_call_list`, `regex_after_commit`, `repeated_key`):
* `content_before_block`: text before the block (other than whitespace, up to
  MAX_HELD_CHARS of it) has streamed as content when the block turns out to hold calls
  (vLLM drops it).
* `unclosed_block`: a block the output ends inside keeps its calls, as bare calls do
  (vLLM's search finds no block and the joined whole output does not parse: all content).
* `bare_calls_then_block`: bare calls followed by a block break at the block's marker (vLLM
  would read the block only).
"""

from __future__ import annotations

from typing import ClassVar

from parsers._base import MAX_HELD_CHARS
from parsers._errors import StateError
from parsers.tools._machine import (
    ANY_MARKER,
    EOS,
    TEXT,
    Run,
    Step,
    Table,
    ToolStreamState,
    nothing,
    to_content,
)
from parsers.tools._python_args import PythonArgs
from parsers.tools.pythonic import ListState, P, PythonicCallsBase, _act

__all__ = ["Olmo3PythonicToolParser", "BLOCK_OPEN", "BLOCK_CLOSE"]

BLOCK_OPEN, BLOCK_CLOSE = "<function_calls>", "</function_calls>"


class Olmo3PythonicToolParser(PythonicCallsBase):
    name: ClassVar[str] = "olmo3"
    initial_phase: ClassVar[str] = P.LEAD
    args_format: ClassVar[PythonArgs] = PythonArgs(line_mode=True)
    bracket_list: ClassVar[bool] = False  # the list ends with the block (or the output)

    def check_ext(self, state: ToolStreamState) -> None:
        super().check_ext(state)
        ext = state.ext
        if state.phase == P.BLOCK and not (isinstance(ext, ListState) and BLOCK_OPEN in ext.raw):
            raise StateError(f"{self.name}: a block state without its marker")

    # -- before the first call --------------------------------------------------------------

    def lead_text(self, run: Run[Olmo3PythonicToolParser], text: str) -> str | None:
        """Whitespace is held (up to MAX_HELD_CHARS); a first line that does not start like a
        call is content."""
        buf = run.ext.raw + text
        if not buf.strip() and len(buf) > MAX_HELD_CHARS:
            self.not_a_call_list(run, buf)
        rest = None if run.phase == P.VERBATIM else self._first_call(run, buf, 0)
        if run.phase == P.VERBATIM:
            run.phase = P.CONTENT  # not bare calls: content, and a block may still come
        return rest

    def block_text(self, run: Run[Olmo3PythonicToolParser], text: str) -> str | None:
        buf = run.ext.raw + text  # whitespace held before the block, its marker, its text
        return self._first_call(run, buf, buf.index(BLOCK_OPEN) + len(BLOCK_OPEN))

    def _first_call(self, run: Run[Olmo3PythonicToolParser], buf: str, start: int) -> str | None:
        """The first line's head, after the whitespace from `start` (vLLM strips lines)."""
        start = len(buf) - len(buf[start:].lstrip())
        if start == len(buf):
            run.ext = run.ext.replace(raw=buf)
            return None
        return self.open_head(run, buf, start)

    def block_open(self, run: Run[Olmo3PythonicToolParser], marker: str) -> None:
        """Whitespace held before the block stays with it (vLLM drops it with the block's
        calls, and returns it as content otherwise); other text was content already."""
        held = run.ext.raw
        if held.strip():
            run.content(held)
            held = ""
        run.ext = run.ext.replace(raw=held + marker, marker=True)
        run.phase = P.BLOCK

    def lead_end(self, run: Run[Olmo3PythonicToolParser], text: str) -> None:
        self.not_a_call_list(run, run.ext.raw)

    def empty_block(self, run: Run[Olmo3PythonicToolParser], marker: str) -> None:
        self.not_a_call_list(run, run.ext.raw + marker)

    # -- the block's end ---------------------------------------------------------------------

    def args_close(self, run: Run[Olmo3PythonicToolParser], marker: str) -> str | None:
        if not run.ext.marker:
            return self.args_text(run, marker)  # bare calls: the marker is text
        self.args_end(run, marker)
        return None

    def list_close(self, run: Run[Olmo3PythonicToolParser], marker: str) -> str | None:
        if not run.ext.marker:
            return self.list_text(run, marker)
        self.list_end(run, marker)
        return None

    def list_closed(self, run: Run[PythonicCallsBase]) -> None:
        run.phase = P.AFTER

    def args_eos(self, run: Run[Olmo3PythonicToolParser], text: str) -> None:
        self.args_end(run)

    def list_eos(self, run: Run[Olmo3PythonicToolParser], text: str) -> None:
        self.list_end(run)


def _olmo3_table() -> Table:
    steps = {
        (P.LEAD, TEXT): Step(_act("lead_text")),
        (P.LEAD, BLOCK_OPEN): Step(_act("block_open")),
        (P.LEAD, EOS): Step(_act("lead_end")),
        (P.CONTENT, TEXT): Step(to_content),
        (P.CONTENT, BLOCK_OPEN): Step(_act("block_open")),
        (P.CONTENT, EOS): Step(nothing),
        (P.BLOCK, TEXT): Step(_act("block_text")),
        (P.BLOCK, BLOCK_CLOSE): Step(_act("empty_block")),
        (P.BLOCK, EOS): Step(_act("lead_end")),
        (P.ARGS, TEXT): Step(_act("args_text")),
        (P.ARGS, BLOCK_CLOSE): Step(_act("args_close")),
        (P.ARGS, EOS): Step(_act("args_eos")),
        (P.LIST, TEXT): Step(_act("list_text")),
        (P.LIST, BLOCK_CLOSE): Step(_act("list_close")),
        (P.LIST, EOS): Step(_act("list_eos")),
        (P.AFTER, TEXT): Step(nothing),  # vLLM reads the first block only
        (P.AFTER, ANY_MARKER): Step(nothing),
        (P.AFTER, EOS): Step(nothing),
        (P.VERBATIM, TEXT): Step(to_content),
        (P.VERBATIM, EOS): Step(nothing),
    }
    return Table({phase for phase, _ in steps}, (BLOCK_OPEN, BLOCK_CLOSE), steps)


Olmo3PythonicToolParser.table = _olmo3_table()
