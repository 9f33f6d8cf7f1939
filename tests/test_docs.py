"""The documentation site: it builds strictly (no broken link, anchor or page), and its runnable snippets run.

A line `<!-- runnable -->` directly before a fenced code block marks the block (docs/tutorial.md is the example):
- a marked block with a title (```` ```python title="first_agent.py" ````) is written to that relative path in the
  page's working directory before anything runs;
- a page's marked ```` ```bash ```` blocks without a title are joined, in page order, into one script, run by
  `bash -euo pipefail` in a fresh temporary working directory (so variables and `eval "$(emulator env)"` carry from
  block to block), with `EMULATOR_STATE_DIR` (a fresh directory) and `EMULATOR_FREE_PORTS=true` set, a timeout of
  five minutes, and `emulator down` at the end whatever happened (a trap).
A page's run must leave nothing behind: no emulator and no process that came from it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MARKER = "<!-- runnable -->"
TIMEOUT = 300
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*)$")
TITLE = re.compile(r"""\btitle=(?:"([^"]*)"|'([^']*)')""")
SCRIPT_LANGS = ("bash", "sh", "shell")


class SnippetError(ValueError):
    """A marker that would run nothing, or a block that cannot be run as marked."""


@dataclass(frozen=True)
class Snippet:
    line: int  # of the block's opening fence, 1-based
    lang: str
    title: str | None
    code: str


def snippets(text: str) -> list[Snippet]:
    """The marked blocks of a page, in order. A marker inside a fenced block is an example, not a marker."""
    lines = text.splitlines()
    found: list[Snippet] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip() == MARKER:
            opening = FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
            if opening is None:
                raise SnippetError(f"line {i + 1}: {MARKER} is not directly followed by a fenced code block")
            start = i + 1
            code, i = _block(lines, start, opening)
            found.append(_snippet(start, opening, code))
        elif opening := FENCE.match(line):
            _, i = _block(lines, i, opening)
        i += 1
    titles = [s.title for s in found if s.title]
    if len(titles) != len(set(titles)):
        raise SnippetError(f"two marked blocks write the same file: {sorted(t for t in titles if titles.count(t) > 1)}")
    return found


def _block(lines: list[str], start: int, opening: re.Match[str]) -> tuple[list[str], int]:
    """The lines of the block opened at `start` (dedented by its fence's indent) and the index of its closing fence."""
    indent, fence = opening["indent"], opening["fence"]
    for j in range(start + 1, len(lines)):
        stripped = lines[j].strip()
        if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
            return [line.removeprefix(indent) for line in lines[start + 1 : j]], j
    raise SnippetError(f"line {start + 1}: the fenced block is never closed")


def _snippet(start: int, opening: re.Match[str], code: list[str]) -> Snippet:
    info = opening["info"].strip()
    lang = info.split()[0].strip("{}.").lower() if info else ""
    title_match = TITLE.search(info)
    title = (title_match[1] or title_match[2]) if title_match else None
    line = start + 1
    if title is not None:
        path = PurePosixPath(title)
        if not title or path.is_absolute() or ".." in path.parts:
            raise SnippetError(f"line {line}: title {title!r} must be a relative path inside the working directory")
    elif lang not in SCRIPT_LANGS:
        raise SnippetError(f"line {line}: a marked block without a title must be bash (it is {lang or 'untyped'})")
    return Snippet(line, lang, title, "\n".join(code) + "\n")


def script(page: str, found: list[Snippet]) -> str:
    """One script of a page's untitled blocks, `emulator down` trapped at its end."""
    parts = ["trap 'emulator down || true' EXIT\n"]
    parts += [f"# {page}, line {s.line}\n{s.code}" for s in found if s.title is None]
    return "\n".join(parts)


def sources() -> list[Path]:
    """The README (its taste) and every page of the site."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def marked_pages() -> list[Path]:
    """Every page with a marker (a page whose markers do not parse is kept: its test says why)."""
    pages = []
    for page in sources():
        text = page.read_text(encoding="utf-8")
        if MARKER not in text:
            continue
        try:
            if snippets(text):
                pages.append(page)
        except SnippetError:
            pages.append(page)
    return pages


PAGES = marked_pages()


def _env(state: Path) -> dict[str, str]:
    """This process's environment without what points at another emulator or pytest run, plus the runner's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMULATOR_", "PIXELTABLE_", "PYTEST_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # `emulator`, this `python`
    env["EMULATOR_STATE_DIR"] = str(state)
    env["EMULATOR_FREE_PORTS"] = "true"
    # A page's own pytest keeps its temporary root apart: one under the shared /tmp/pytest-of-USER would make that
    # folder private again while the real client's Postgres (pxt tests on the other worker) reads through it.
    temproot = state.parent / "pytest-tmp"
    temproot.mkdir(exist_ok=True)
    env["PYTEST_DEBUG_TEMPROOT"] = str(temproot)
    return env


def _leftover_processes(base: Path) -> list[str]:
    """Processes that came from the page's run (started in its directory, or carrying its path), each killed once
    found, so a page that leaves one behind fails without leaving it to the next."""
    needle = str(base).encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(proc / "cwd")
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if (cwd + os.sep).startswith(str(base) + os.sep) or needle in cmdline or needle in environ:
            command = cmdline.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"process {proc.name}: {command[:160]}")
            with contextlib.suppress(OSError):
                os.kill(int(proc.name), signal.SIGKILL)
    return found


def _leftover_containers(state: Path) -> list[str]:
    """The Docker runtime's containers of the page's emulator (labelled with a digest of its state dir)."""
    if shutil.which("docker") is None:
        return []
    tag = hashlib.sha256(str(state.resolve()).encode()).hexdigest()[:10]
    out = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"label=pxt-emulator={tag}", "--format", "{{.Names}} {{.Status}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return [f"container {line}" for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


@dataclass(frozen=True)
class PageRun:
    """A page's script run: its exit status, what it left behind (found and stopped), and what it printed."""

    returncode: int
    left: list[str]
    elapsed: float
    output: str
    report: str  # the exit status, the output's end and the emulator log's tail, for a failure's message


def run_page(page: Path) -> PageRun:
    """Run a page's marked blocks as the module's docstring says, then remove its directory."""
    found = snippets(page.read_text(encoding="utf-8"))
    name = str(page.relative_to(ROOT))
    base = Path(tempfile.mkdtemp(prefix="pxt-docs-"))  # short: the state dir holds unix sockets
    work, state = base / "work", base / "state"
    work.mkdir()
    for s in found:
        if s.title is not None:
            target = work / s.title
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(s.code, encoding="utf-8")
    (base / "page.sh").write_text(script(name, found), encoding="utf-8")
    started = time.monotonic()
    proc = subprocess.Popen(
        ["bash", "-euo", "pipefail", str(base / "page.sh")],
        cwd=work,
        env=_env(state),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: a timeout ends everything it started
    )
    try:
        output = proc.communicate(timeout=TIMEOUT)[0].decode(errors="replace")
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output = proc.communicate()[0].decode(errors="replace") + f"\n(killed after {TIMEOUT} s)"
    elapsed = time.monotonic() - started
    try:
        left: list[str] = []
        if (state / "endpoints.json").exists():
            left.append(f"{state / 'endpoints.json'}: an emulator the trap's `emulator down` did not stop")
            # Stopped here, so one page's failure leaves the next page a clean machine.
            subprocess.run(["emulator", "down"], env=_env(state), capture_output=True, timeout=60, check=False)
        left += _leftover_processes(base) + _leftover_containers(state)
        log = state / "emulator.log"
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:]) if log.is_file() else "(no log)"
        report = f"{name}: exit {proc.returncode}\n{output[-20000:]}\n--- emulator.log (tail)\n{tail}"
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return PageRun(proc.returncode, left, elapsed, output, report)
    return elapsed, output


def test_site_builds_strictly(tmp_path: Path) -> None:
    env = {**os.environ, "DISABLE_MKDOCS_2_WARNING": "true", "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stdout}\n{built.stderr}"
    assert (tmp_path / "site" / "tutorial" / "index.html").is_file()


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_runnable_snippets_run(page: Path) -> None:
    run = run_page(page)
    assert run.returncode == 0, run.report
    assert not run.left, f"{page.relative_to(ROOT)} left behind:\n" + "\n".join(run.left)
    print(f"{page.relative_to(ROOT)}: {run.elapsed:.1f} s")


def test_the_tutorial_is_runnable() -> None:
    """The runner found the tutorial: it has titled files and a script (the collection is not silently empty)."""
    assert DOCS / "tutorial.md" in PAGES
    found = snippets((DOCS / "tutorial.md").read_text(encoding="utf-8"))
    assert {s.title for s in found if s.title} == {"first_agent.py", "test_first_agent.py"}
    assert "emulator up -d" in script("docs/tutorial.md", found)


def test_every_page_marks_only_blocks_it_can_run() -> None:
    """Every page's markers parse (a marker before prose, an untitled non-bash block or a title outside the
    working directory would run nothing, or the wrong thing)."""
    errors = []
    for page in sources():
        try:
            snippets(page.read_text(encoding="utf-8"))
        except SnippetError as e:
            errors.append(f"{page.relative_to(ROOT)}: {e}")
    assert not errors, "\n".join(errors)


BASH_BLOCK = "```bash\necho one\n```\n"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (f"{MARKER}\nSome prose.\n{BASH_BLOCK}", "not directly followed"),
        (f"{MARKER}\n\n{BASH_BLOCK}", "not directly followed"),
        (f"Text.\n{MARKER}\n", "not directly followed"),
        (f"{MARKER}\n```bash\necho never closed\n", "never closed"),
        (f'{MARKER}\n```python\nprint("no title")\n```\n', "must be bash"),
        (f'{MARKER}\n```python title="../outside.py"\npass\n```\n', "relative path"),
        (f'{MARKER}\n```python title="/tmp/x.py"\npass\n```\n', "relative path"),
        (f'{MARKER}\n```toml title="a.toml"\n```\n{MARKER}\n```toml title="a.toml"\n```\n', "same file"),
    ],
)
def test_a_marker_that_would_run_nothing_is_an_error(text: str, error: str) -> None:
    with pytest.raises(SnippetError, match=error):
        snippets(text)


def test_blocks_are_read_in_page_order_with_their_titles_and_indent() -> None:
    text = (
        f"{MARKER}\n```bash\nA=1\n```\n"
        "````markdown\n"  # an example of the syntax, not a marker
        f"{MARKER}\n```bash\nrm -rf /\n```\n"
        "````\n"
        '!!! note\n    <!-- runnable -->\n    ```python title="pkg/mod.py"\n    X = 1\n    ```\n'
        f"{MARKER}\n```bash\necho $A\n```\n"
        "```bash\necho unmarked\n```\n"
    )
    found = snippets(text)
    assert [(s.lang, s.title, s.code) for s in found] == [
        ("bash", None, "A=1\n"),
        ("python", "pkg/mod.py", "X = 1\n"),
        ("bash", None, "echo $A\n"),
    ]
    assert [s.line for s in found] == [2, 13, 17]
    joined = script("p.md", found)
    assert joined.index("A=1") < joined.index("echo $A") and "unmarked" not in joined and "rm -rf" not in joined
    assert joined.startswith("trap 'emulator down || true' EXIT")
