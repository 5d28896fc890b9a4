"""A small reader of our Dockerfile: stages and their instructions, enough for the checks in
test_dockerfile.py and for replaying the builder stage in test_image_install.py. It handles
the forms the Dockerfile uses (line continuations, comments, exec-form JSON, ARG defaults in
FROM); it is not a general Dockerfile parser."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ._tools import ROOT

DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


@dataclass
class Instruction:
    op: str
    args: str

    def exec_form(self) -> list[str]:
        value = json.loads(self.args)
        assert isinstance(value, list), f"{self.op} is not in exec form: {self.args}"
        return value

    def words(self) -> list[str]:
        return shlex.split(self.args)


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, op: str) -> list[Instruction]:
        return [i for i in self.instructions if i.op == op]


def instructions(text: str) -> list[Instruction]:
    logical, current = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    out = []
    for line in logical:
        op, _, rest = line.partition(" ")
        out.append(Instruction(op.upper(), rest.strip()))
    return out


def stages(text: str | None = None) -> tuple[dict[str, str], list[Stage]]:
    """(global ARG defaults, stages in order)."""
    args: dict[str, str] = {}
    result: list[Stage] = []
    for ins in instructions(text if text is not None else DOCKERFILE.read_text()):
        if ins.op == "FROM":
            words = ins.words()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], words[0])
            name = words[2] if len(words) > 2 and words[1].upper() == "AS" else None
            result.append(Stage(base, name))
        elif not result and ins.op == "ARG":
            key, _, default = ins.args.partition("=")
            args[key] = default
        else:
            result[-1].instructions.append(ins)
    return args, result


def env_of(stage: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for ins in stage.all("ENV"):
        for word in ins.words():
            key, _, value = word.partition("=")
            env[key] = value
    return env


def copy_sources(ins: Instruction) -> tuple[list[str], str, dict[str, str]]:
    """(sources, destination, --flags) of a COPY."""
    words = ins.words()
    flags = {}
    while words[0].startswith("--"):
        key, _, value = words.pop(0)[2:].partition("=")
        flags[key] = value
    return words[:-1], words[-1], flags


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def dockerignored(relpath: str) -> bool:
    """Whether Docker leaves `relpath` out of the build context: patterns in order, the last
    match wins, `!` re-includes, `*` stays within one folder, `**` spans folders, and a pattern
    that matches a folder matches everything below it."""
    parts = relpath.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for raw in DOCKERIGNORE.read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        regex = _pattern_regex(pattern.lstrip("!").strip("/"))
        if any(regex.match(p) for p in prefixes):
            ignored = not negate
    return ignored


def context_files(source: str) -> list[Path]:
    """Files of the build context that `COPY source` takes."""
    matched = sorted(ROOT.glob(source))
    files = []
    for path in matched:
        candidates = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        files.extend(p for p in candidates if not dockerignored(p.relative_to(ROOT).as_posix()))
    return files


def repo_path(path: str) -> Path:
    return Path(ROOT, path)
