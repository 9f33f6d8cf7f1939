"""Reads a docs folder (markdown with front matter, or HTML) into pages and passages.

A page's URL path is its file path without the extension (`docs/cli/pxt-new.md` → `/docs/cli/pxt-new`,
`index.md` → `/`). A passage is one `##` section (or `<h2>` section in HTML); it is the unit the
search ranks and the answer quotes.
"""

from __future__ import annotations

import hashlib
import re
from html.parser import HTMLParser
from pathlib import Path

import msgspec

SUFFIXES = (".md", ".markdown", ".html", ".htm")
INDEX_FORMAT = "4"  # bump when the way pages are split or cleaned changes


class Passage(msgspec.Struct):
    heading: str
    text: str  # prose
    code: str = ""  # code blocks and examples, indexed with a lower weight


class Page(msgspec.Struct):
    path: str  # URL path, starting with "/"
    source: str  # file path relative to the docs folder
    title: str
    description: str
    body: str  # the page as served (markdown or HTML source)
    kind: str  # "markdown" | "html"
    passages: list[Passage]


def corpus_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.suffix.lower() in SUFFIXES and p.is_file() and not _hidden(p, root))


def _hidden(p: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in p.relative_to(root).parts)


def fingerprint(root: Path) -> str:
    """Changes whenever a page is added, removed or edited (or the index format changes)."""
    h = hashlib.sha256(f"{INDEX_FORMAT}\0{root.resolve()}".encode())
    for p in corpus_files(root):
        st = p.stat()
        h.update(f"\0{p}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()


def url_path(rel: Path) -> str:
    parts = list(rel.with_suffix("").parts)
    if parts and parts[-1] == "index":
        parts.pop()
    return "/" + "/".join(parts)


def load(root: Path) -> list[Page]:
    base = root.parent if root.is_file() else root
    pages = []
    for p in corpus_files(root):
        text = p.read_text(encoding="utf-8", errors="replace")
        rel = p.relative_to(base)
        if p.suffix.lower() in (".html", ".htm"):
            page = parse_html(text, rel)
        else:
            page = parse_markdown(text, rel)
        if page.passages:
            pages.append(page)
    return pages


# --- markdown -------------------------------------------------------------------------------------

_FRONT = re.compile(r"\A---\s*\n(.*?)\n---\s*\n", re.S)
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_EMPH = re.compile(r"(\*\*|__|\*|`)")


def clean_inline(text: str) -> str:
    """Markdown inline syntax removed, so passages read as prose."""
    return _EMPH.sub("", _LINK.sub(r"\1", text))


def parse_markdown(text: str, rel: Path) -> Page:
    meta: dict[str, str] = {}
    m = _FRONT.match(text)
    content = text
    if m:
        content = text[m.end() :]
        for line in m.group(1).splitlines():
            key, sep, value = line.partition(":")
            if sep:
                meta[key.strip().lower()] = value.strip().strip("\"'")
    title = meta.get("title", "")
    # (heading, prose lines, code lines) per section
    sections: list[tuple[str, list[str], list[str]]] = [("", [], [])]
    in_code = False
    for line in content.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            sections[-1][2].append(line)
        elif line.startswith("# "):
            title = title or line[2:].strip()
        elif re.match(r"#{2,3} ", line):
            sections.append((line.lstrip("#").strip(), [], []))
        else:
            sections[-1][1].append(line)
    title = title or rel.stem.replace("-", " ").capitalize()
    passages = []
    for heading, prose, code in sections:
        body = clean_inline("\n".join(prose)).strip()
        if body or code:
            passages.append(Passage(clean_inline(heading) or title, body, "\n".join(code).strip()))
    description = meta.get("description") or _first_prose(passages)
    return Page(url_path(rel), str(rel), clean_inline(title), description, text, "markdown", passages)


def _first_prose(passages: list[Passage]) -> str:
    for p in passages:
        for para in p.text.split("\n\n"):
            para = " ".join(para.split())
            if para and not para.startswith(("```", "|", "-", "*", ">")):
                return para[:240]
    return ""


# --- HTML -----------------------------------------------------------------------------------------


class _HtmlText(HTMLParser):
    SKIP = frozenset({"script", "style", "nav", "header", "footer", "noscript", "svg"})
    BLOCK = frozenset({"p", "div", "li", "pre", "tr", "br", "section", "article", "table", "ul", "ol", "h3", "h4"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title = ""
        self.description = ""
        self.h1 = ""
        self.sections: list[tuple[str, list[str], list[str]]] = [("", [], [])]
        self._skip = 0
        self._pre = 0
        self._in: str | None = None
        self._buf: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP:
            self._skip += 1
        elif tag == "meta":
            a = dict(attrs)
            if (a.get("name") or "").lower() == "description":
                self.description = a.get("content") or ""
        elif tag in ("title", "h1", "h2"):
            self._in, self._buf = tag, []
        elif tag == "pre":
            self._pre += 1
        elif tag in self.BLOCK:
            self.sections[-1][1].append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP:
            self._skip = max(0, self._skip - 1)
        elif tag == "pre":
            self._pre = max(0, self._pre - 1)
            self.sections[-1][2].append("\n")
        elif tag == self._in:
            text = " ".join("".join(self._buf).split())
            if tag == "title":
                self.title = text
            elif tag == "h1":
                self.h1 = self.h1 or text
            else:
                self.sections.append((text, [], []))
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._in:
            self._buf.append(data)
        else:
            _, text, code = self.sections[-1]
            (code if self._pre else text).append(data)


def parse_html(text: str, rel: Path) -> Page:
    parser = _HtmlText()
    parser.feed(text)
    title = parser.h1 or parser.title or rel.stem.replace("-", " ").capitalize()
    passages = []
    for heading, prose, code in parser.sections:
        lines = [" ".join(line.split()) for line in "".join(prose).splitlines()]
        body = "\n".join(line for line in lines if line).strip()
        code_text = "".join(code).strip()
        if body or code_text:
            passages.append(Passage(heading or title, body, code_text))
    description = parser.description or _first_prose(passages)
    return Page(url_path(rel), str(rel), title, description, text, "html", passages)
