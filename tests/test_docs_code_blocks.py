"""Every code block in README.md and docs/*.md runs.

A ```python block is executed; the blocks of one file run in order and share one namespace, so
a page reads as one program. A ```bash block holds `graphnn ...` command lines (comments and
blank lines aside), each run through the command-line entry point, which must exit 0. Other
fences (```text, plain ```) are output or IR shown to the reader and are not run. A block that
is deliberately not run (an install command, a run of minutes) has the marker line
`<!-- docs-test: skip (reason) -->` right above its fence; there are few of them.

Blocks run with the repository root as the working directory (so `examples/models.py` is
found) and with a private kernel cache. A failure names the file and the block's first line,
and Python tracebacks point at the Markdown lines themselves.
"""
from __future__ import annotations

import pathlib
import re
import shlex
import time
from dataclasses import dataclass

import pytest

from cli_run import in_process
from compile_helpers import isolated_cache  # noqa: F401  (autouse: a private kernel cache)
from graphnn.ir.registry import REGISTRY

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
SKIP = re.compile(r"^<!-- docs-test: skip \((.+)\) -->$")
MAX_SKIPPED = 6  # across every page: not-run blocks are the exception
PAGE_BUDGET_S = 12.0  # one page's blocks; every page together stays near 30 s


@dataclass
class Block:
    page: pathlib.Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    skip: str | None  # the reason, when marked

    def name(self) -> str:
        """The page's path from the repository root (as traced graphs show it)."""
        return str(self.page.relative_to(ROOT)) if self.page.is_relative_to(ROOT) \
            else str(self.page)

    def where(self) -> str:
        return f"{self.name()}:{self.line}"


def blocks_of(page: pathlib.Path) -> list[Block]:
    """The fenced blocks of a Markdown page, indentation removed (blocks inside list items)."""
    lines = page.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, lang = opening.groups()
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        assert end < len(lines), f"{page.name}:{i + 1}: unclosed code fence"
        body = [line[len(indent):] if line.startswith(indent) else line.lstrip()
                for line in lines[i + 1:end]]
        marker = SKIP.match(lines[i - 1].strip()) if i else None
        out.append(Block(page, i + 1, lang, "\n".join(body) + "\n",
                         marker.group(1) if marker else None))
        i = end + 1
    return out


def run_python(block: Block, namespace: dict) -> None:
    # blank lines in front, so tracebacks give the page's own line numbers
    code = compile("\n" * block.line + block.text, block.name(), "exec")
    exec(code, namespace)


def run_bash(block: Block, capsys) -> None:
    for line in block.text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        words = shlex.split(line, comments=True)
        assert words[0] == "graphnn", \
            f"{block.where()}: a bash block runs `graphnn ...` lines only (mark others skipped): {line!r}"
        result = in_process(words[1:], capsys)
        assert result.returncode in (0, None), \
            f"{block.where()}: `{line}` exited {result.returncode}\n{result.stderr[-2000:]}"


def test_pages_and_markers_are_found():
    pages = {p.name for p in PAGES}
    assert {"README.md", "tutorial.md", "porting.md", "adding-an-op.md",
            "writing-a-pass.md", "reference.md"} <= pages
    blocks = [b for page in PAGES for b in blocks_of(page)]
    assert sum(b.lang == "python" and b.skip is None for b in blocks) >= 20
    skipped = [b.where() for b in blocks if b.skip]
    assert len(skipped) <= MAX_SKIPPED, skipped


def test_readme_commands_are_the_main_job_and_what_ci_runs():
    (commands,) = [b for b in blocks_of(ROOT / "README.md") if b.lang == "bash" and b.skip]
    first, second = commands.text.splitlines()
    assert first == "pip install -e '.[examples]' && python examples/digits_cnn.py"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert second in ci, "README's test command and .ci/run disagree"


def test_block_parser_reads_indented_fences_and_markers(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("text\n- item\n\n  ```python\n  x = 1\n  ```\n"
                    "<!-- docs-test: skip (slow) -->\n```bash\ngraphnn fuzz\n```\n```\nraw\n```\n")
    python, bash, raw = blocks_of(page)
    assert (python.lang, python.text, python.line, python.skip) == ("python", "x = 1\n", 4, None)
    assert (bash.lang, bash.skip) == ("bash", "slow")
    assert (raw.lang, raw.text) == ("", "raw\n")


def test_a_failing_block_names_its_page_line(tmp_path, capsys):
    page = tmp_path / "p.md"
    page.write_text("# t\n\n```python\nx = 1\ny = x / 0\n```\n")
    (block,) = blocks_of(page)
    with pytest.raises(ZeroDivisionError) as info:
        run_python(block, {})
    assert info.traceback[-1].lineno + 1 == 5  # pytest's line numbers are 0-based
    with pytest.raises(AssertionError, match="exited 2"):
        run_bash(Block(page, 1, "bash", "graphnn dump-ir no/such/file.py:M --input 2\n", None),
                 capsys)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_code_blocks_run(page, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(ROOT))
    namespace = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    registered = dict(REGISTRY)  # docs/adding-an-op.md registers an op: removed afterwards
    start = time.process_time()  # CPU time: the machine may be shared
    try:
        for block in blocks_of(page):
            if block.skip:
                continue
            if block.lang == "python":
                run_python(block, namespace)
            elif block.lang == "bash":
                run_bash(block, capsys)
    finally:
        REGISTRY.clear()
        REGISTRY.update(registered)
    seconds = time.process_time() - start
    assert seconds < PAGE_BUDGET_S, f"{page.name}'s blocks took {seconds:.1f} s: use smaller models"
