"""The examples of README.md and docs/*.md, read from the files themselves
(so an edited document is tested as it stands), for tests/test_doc_examples.py.

What counts as an example:

* every ``dpreg ...`` command line (a trailing ``\\`` joins the next line; a
  ``# comment`` after it is dropped) in a fenced or indented code block, and
  every ``python -c ...`` line there (it makes a file the next commands read);
* a fenced block that holds a shell loop around ``dpreg`` (``for ...; do``):
  the whole block, run by bash;
* every ```` ```python ```` block of README.md, run as a script;
* a block whose first line is a comment naming a file (``# run.toml``,
  ``# grid.toml``, ``# dpreg_huber/hooks.py``) is that file's content: it is
  written (at that path, in the clone the examples run in) before the
  document's commands run, and is not itself run.

Not examples: a block that regenerates a page of the repository's own
experiments or benchmarks (one that runs a ``python experiments/...`` or
``python benchmarks/...`` script or a grid of ``experiments/sweeps/``, or copies
results into ``experiments/results``: hours of computing, run by their
maintainers; the scripts are smoke-run at a tiny size by
tests/test_experiments_smoke.py and CI's ``pytest benchmarks``, and the grids
checked by tests/test_sweep.py) and
set-up commands (``pip``, ``python -m pytest``: tests/test_readme.py checks
those are the ones CI runs).  A command with a placeholder (``...``,
``host:8786``) is listed with the reason it cannot run as written.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: a first line naming the file a block holds: "# run.toml", "# dpreg_huber/hooks.py"
FILE_NAME = re.compile(r"^#\s*([\w./-]+\.(?:toml|py|csv|txt|svm|json))\s*$")
#: placeholders that make a command a template, not something to type as is
PLACEHOLDERS = ("...", "host:8786", "HOST", "<cell>")


@dataclass
class Example:
    doc: str          # path relative to the checkout
    line: int         # 1-based line of the example's first line
    kind: str         # "dpreg" (one command), "shell" (a block run by bash), "python" (a script)
    text: str
    skip: str = ""    # why it cannot run as written ("" if it can)

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


@dataclass
class Block:
    doc: str
    line: int         # line of the block's first content line
    info: str         # the fence's info string ("" for an indented block)
    lines: list


def documents() -> list[Path]:
    """README.md and every docs/*.md."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The code blocks of a markdown file: fenced (```info ... ```), and
    indented by four spaces after a blank line (outside lists)."""
    rel = str(path.relative_to(ROOT))
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        ln = lines[i]
        m = re.match(r"^(\s*)```(.*)$", ln)
        if m:
            indent, info = len(m.group(1)), m.group(2).strip()
            j = i + 1
            body = []
            while j < len(lines) and not lines[j].strip().startswith("```"):
                body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
                j += 1
            out.append(Block(rel, i + 2, info, body))
            i = j + 1
            continue
        if ln.startswith("    ") and ln.strip() and (i == 0 or not lines[i - 1].strip()):
            j = i
            body = []
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                body.append(lines[j][4:])
                j += 1
            while body and not body[-1].strip():
                body.pop()
            out.append(Block(rel, i + 1, "", body))
            i = j
            continue
        i += 1
    return out


def _commands(block: Block):
    """(line, command) of every ``dpreg`` command of a block, and of every
    ``python -c`` one (the files an example reads, made as a reader would),
    continuations joined."""
    i = 0
    while i < len(block.lines):
        raw = block.lines[i]
        s = raw.strip()
        if s.startswith("$ "):
            s = s[2:]
        start = i
        if s.startswith(("dpreg ", "python -c ")) or s == "dpreg":
            parts = [s]
            while parts[-1].split("  #")[0].rstrip().endswith("\\") and i + 1 < len(block.lines):
                parts[-1] = parts[-1].split("  #")[0].rstrip()[:-1]
                i += 1
                parts.append(block.lines[i].strip())
            cmd = _without_comment(" ".join(p.strip() for p in parts))
            yield block.line + start, cmd
        i += 1


def _without_comment(cmd: str) -> str:
    """``cmd`` without a trailing shell comment (a ``#`` after white space,
    outside quotes)."""
    quote = None
    for i, ch in enumerate(cmd):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or cmd[i - 1].isspace()):
            return cmd[:i].strip()
    return cmd.strip()


def _experiment_recipe(text: str) -> bool:
    """Whether a command regenerates one of the repository's experiment pages."""
    code = "\n".join(ln.split("#")[0] for ln in text.splitlines())
    return bool(re.search(r"(benchmarks|experiments)/(sweeps|results)/|python\s+(benchmarks|experiments)/", code))


def examples() -> list[Example]:
    """Every example of the documents, in document order."""
    out: list[Example] = []
    for path in documents():
        for b in blocks(path):
            first = b.lines[0].strip() if b.lines else ""
            if FILE_NAME.match(first):
                continue  # a file's content (see files())
            if b.info.startswith("python"):
                if b.doc == "README.md":
                    text = "\n".join(b.lines)
                    out.append(Example(b.doc, b.line, "python", text, _placeholder(text)))
                continue
            if b.info and not b.info.startswith(("bash", "sh", "shell", "console")):
                continue
            text = "\n".join(b.lines)
            if _experiment_recipe(text):
                continue  # the block reproduces an experiment page: its commands go together
            if re.search(r"^\s*for .*;\s*do\b", text, re.M) and "dpreg " in text:
                out.append(Example(b.doc, b.line, "shell", text, _placeholder(text)))
                continue
            for line, cmd in _commands(b):
                kind = "dpreg" if cmd.startswith("dpreg") else "shell"
                out.append(Example(b.doc, line, kind, cmd, _placeholder(cmd)))
    return out


def _placeholder(text: str) -> str:
    for p in PLACEHOLDERS:
        if p in text:
            return f"a placeholder ({p!r}) stands for what the reader supplies"
    return ""


def files(doc: str) -> dict[str, str]:
    """The files a document's blocks hold (name -> content), see the module docstring."""
    out = {}
    for b in blocks(ROOT / doc):
        first = b.lines[0].strip() if b.lines else ""
        m = FILE_NAME.match(first)
        if m:
            out[m.group(1)] = "\n".join(b.lines[1:]) + "\n"
    return out
