"""Reading one `{"name": ..., "arguments": ...}` JSON call (the legacy JSON families).

A family opens a call (`open`), hands it the call's text (`read`) and closes it at its end
marker or at the end of the output (`close`). The reader:

* holds the raw text (pre-commit, a few dozen characters) until the body has shown its name
  and then the start of its arguments; then it sends the call (id, name) and streams the
  arguments as canonical JSON (`_json_args`, ENVELOPE);
* holds the body whole when the arguments come before the name, and decides it at its end
  with the family's batch rule (`batch`), as it does for a body that never commits;
* after the commit, a body that stops being JSON keeps its text: the arguments are the
  canonical text up to the fault followed by the raw text from there; text after a complete
  body that makes it invalid is content (the families document both as divergences);
* with an `admit` rule, commits only once the arguments value's first token shows a type
  the family accepts (a refused type holds the body whole, decided at its end);
* reports where the body's value ended (`read` returns the text after it), for families
  whose calls end with their JSON value rather than with a marker.

A body rejected before the commit goes back to the family (`reject`): vLLM makes the whole
output content for the first call; the family decides for later ones.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from parsers._errors import StateError
from parsers.tools._json_args import DONE, ERROR, MORE, JsonArgs, JsonArgsState, Root
from parsers.tools._machine import CallState, Run

__all__ = ["Body", "JsonCall", "JsonCallReader"]


class Body(enum.StrEnum):
    READ = "read"  # before the commit: the raw body is held in `raw`
    HOLD = "hold"  # arguments before the name: held whole, decided at the end
    ARGS = "args"  # committed: the arguments stream
    RAW = "raw"  # committed, the arguments stopped being JSON: the text is argument text
    TAIL = "tail"  # committed, the arguments complete: the rest of the body is checked
    JUNK = "junk"  # committed, the body broke after its arguments: its text is content


@dataclass(frozen=True, slots=True)
class JsonCall(CallState):
    body: Body = Body.READ
    args: JsonArgsState | None = None

    def __post_init__(self) -> None:
        # Every family reading calls this way relies on it: a restored call without its
        # body state is refused here (a StateError on load), not in each family.
        if self.args is None:
            raise ValueError("a JSON tool call without its argument state")

    @property
    def envelope(self) -> JsonArgsState:
        """The envelope's scanner state (always set: see __post_init__)."""
        if self.args is None:
            raise StateError("a JSON tool call without its argument state")
        return self.args


# (run, raw body) -> whether the family accepted it (it emits the call itself).
BatchRule = Callable[[Run[Any], str], bool]
# (run, raw text of the call after its marker) -> the family's handling of a non-call.
Reject = Callable[[Run[Any], str], None]
# The arguments value's first token kind (JsonArgsState.kind, "" before it) -> commit now
# (True), hold the body whole (False) or wait for the token (None).
Admit = Callable[[str], bool | None]


def admit_any(kind: str) -> bool | None:
    return True


class JsonCallReader:
    """One family's reader (stateless: the call's progress lives in `run.call`)."""

    def __init__(
        self,
        *,
        args_keys: tuple[str, ...],
        limit: int,
        ends_with_value: bool,
        decide: BatchRule,
        reject: Reject,
        string_verbatim: bool = False,
        admit: Admit = admit_any,
    ) -> None:
        """`ends_with_value`: the call ends where its JSON value ends (else at a marker).
        `decide`: the family's batch rule for a body that never committed; `reject`: what a
        body it refuses becomes."""
        self.envelope = JsonArgs(
            root=Root.ENVELOPE, args_keys=args_keys, limit=limit, string_verbatim=string_verbatim
        )
        self.ends_with_value = ends_with_value
        self.decide, self.reject, self.admit = decide, reject, admit

    def open(self, run: Run[Any]) -> None:
        run.call = JsonCall(args=self.envelope.start())

    def read(self, run: Run[Any], text: str) -> str | None:
        """Feed call text; returns the text after the call's value once it ended (families
        ending with the value), else None."""
        call: JsonCall = run.call
        if call.body in (Body.READ, Body.HOLD):
            call = call.replace(raw=call.raw + text)
            run.call = call
            if call.body is Body.HOLD:
                return self._hold(run, call, text)
        if call.body is Body.RAW:
            run.args(text)
            return None
        if call.body is Body.JUNK:
            run.content(text)
            return None
        if call.body is Body.TAIL:
            return self._tail(run, text)
        args, out, rest = self.envelope.feed(call.envelope, text)
        run.call = call = call.replace(args=args)
        if call.body is Body.READ:
            verdict = self.admit(args.kind) if args.started else None
            if verdict:
                self._commit(run, call)
            elif verdict is False:
                run.call = call.replace(body=Body.HOLD)
            elif args.status != MORE:
                return self._read_ended(run, call, rest)
        call = run.call
        if call.body is Body.ARGS:
            run.args(out)
            if args.where == "a" or args.status == DONE:
                run.call = call.replace(body=Body.TAIL)
                return self._tail(run, rest or "") if args.status != MORE else None
            if args.status == ERROR:
                run.args(self.envelope.held_raw(args) + (rest or ""))
                run.call = call.replace(body=Body.RAW)
        elif call.body is Body.HOLD and args.status != MORE:
            return self._read_ended(run, call, rest)
        return None

    def _commit(self, run: Run[Any], call: JsonCall) -> None:
        if not call.envelope.ordered:  # the arguments came first: decide at the end
            run.call = call.replace(body=Body.HOLD)
            return
        run.call = call.replace(body=Body.ARGS, raw="")
        run.start_call(call.envelope.name)

    def _hold(self, run: Run[Any], call: JsonCall, text: str) -> str | None:
        """A held body whose value's end matters (families ending with the value)."""
        if not self.ends_with_value:
            return None
        args, _, rest = self.envelope.feed(call.envelope, text)
        run.call = call.replace(args=args)
        if args.status == MORE:
            return None
        return self._read_ended(run, run.call, rest)

    def _read_ended(self, run: Run[Any], call: JsonCall, rest: str | None) -> str | None:
        """An uncommitted body whose value ended (or broke): decided now, by the family."""
        if not self.ends_with_value:
            return None
        rest = rest or ""
        raw = call.raw[: len(call.raw) - len(rest)] if rest else call.raw
        run.call = None
        if not self.decide(run, raw):
            self.reject(run, raw)
        return rest

    def _tail(self, run: Run[Any], text: str) -> str | None:
        """Text in a committed body after its arguments: the rest of the envelope
        (validated); with a marker-ended body, text that makes it invalid is content."""
        call: JsonCall = run.call
        args = call.envelope
        if args.status == MORE:
            args, _, rest = self.envelope.feed(args, text)
            run.call = call = call.replace(args=args)
            if args.status == MORE:
                return None
            text = rest or ""
        if args.status == ERROR:  # documented: what broke the body is content
            run.content(self.envelope.held_raw(args) + text)
            if self.ends_with_value:
                return ""
            run.call = call.replace(body=Body.JUNK)
            return None
        if self.ends_with_value:
            return text if args.status == DONE else None  # the call ended with its value
        if args.status == DONE and not (call.raw + text).strip():
            run.call = call.replace(raw=call.raw + text)  # whitespace: held, may be last
            return None
        run.content(call.raw + text)
        run.call = call.replace(raw="")
        return None

    def close(self, run: Run[Any], marker: str) -> None:
        """The call ended at `marker` ("" at the end of the output)."""
        call: JsonCall = run.call
        if call.body is Body.ARGS:
            args, out = self.envelope.end(call.envelope)
            run.args(out)
            if args.status != DONE:
                run.args(self.envelope.held_raw(args))
        elif call.body is Body.TAIL and call.envelope.status == MORE:
            args, _ = self.envelope.end(call.envelope)
            if args.status != DONE:
                run.content(self.envelope.held_raw(args))
        elif call.body in (Body.READ, Body.HOLD):
            run.call = None
            if not self.decide(run, call.raw):
                self.reject(run, call.raw + marker)
            return
        run.call = None
