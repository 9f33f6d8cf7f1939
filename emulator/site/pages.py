"""The docs pages themselves, so every URL that /ask and search_docs return can be opened.

`/docs/x` is served as HTML to browsers and as markdown with `Accept: text/markdown` or a `.md`
suffix (the markdown twins agents read); `/llms.txt` lists every page, and `/docs` is their index for people
(unless the docs folder has a page of its own there). A markdown page rendered as HTML carries the way around: home,
the index, and the previous and next page in the index's order. HTML pages of a folder are served as written.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any

from litestar import Request, Response, get, route

from emulator.core import html, openapi
from emulator.core.contract import errors
from emulator.core.errors import NOT_FOUND
from emulator.site.state import Accept, site_of

_FRONT = re.compile(r"\A---\s*\n.*?\n---\s*\n", re.S)
_INLINE_CODE = re.compile(r"`([^`]+)`")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")


def _inline(text: str) -> str:
    out = html.escape(text, quote=False)
    out = _INLINE_CODE.sub(r"<code>\1</code>", out)
    out = _BOLD.sub(r"<strong>\1</strong>", out)
    return _LINK.sub(lambda m: f'<a href="{html.escape(m.group(2))}">{m.group(1)}</a>', out)


INDEX = "/docs"  # the docs index's path


def _section(url: str) -> str:
    """The index section a page is listed under: its first folder below /docs (`/docs/cli/x` → `cli`)."""
    parts = url.strip("/").split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "docs" else ""


def _listed(rows: list[sqlite3.Row]) -> list[sqlite3.Row]:
    """The pages the index lists and previous/next walk, in one order: by section, then by URL (home is not one)."""
    return sorted((r for r in rows if r["url"] != "/"), key=lambda r: (_section(r["url"]), r["url"]))


def _nav(url: str, rows: list[sqlite3.Row]) -> tuple[str, str]:
    """A page's way around, above and below its text: home and the index; the previous and the next page."""
    top = f'<nav class="crumbs" aria-label="Docs"><a href="/">Home</a><a href="{INDEX}">All docs</a></nav>'
    listed = _listed(rows)
    at = next((i for i, r in enumerate(listed) if r["url"] == url), None)
    if at is None:
        return top, ""
    links = []
    if at > 0:
        prev = listed[at - 1]
        links.append(
            f'<a rel="prev" href="{html.escape(prev["url"])}"><span>Previous</span>{html.escape(prev["title"])}</a>'
        )
    if at + 1 < len(listed):
        nxt = listed[at + 1]
        links.append(f'<a rel="next" href="{html.escape(nxt["url"])}"><span>Next</span>{html.escape(nxt["title"])}</a>')
    return top, f'<nav class="pager" aria-label="Previous and next">{"".join(links)}</nav>'


def docs_index(rows: list[sqlite3.Row], as_markdown: bool) -> Response[str]:
    """`/docs`: every page, by section, with its description (markdown for agents, as its pages are)."""
    sections: dict[str, list[sqlite3.Row]] = {}
    for row in _listed(rows):
        sections.setdefault(_section(row["url"]), []).append(row)
    if as_markdown:
        lines = ["# Documentation", ""]
        for name, items in sections.items():
            lines += [f"## {name.capitalize() or 'Pages'}", ""]
            lines += [f"- [{r['title']}]({r['url']}): {r['description']}" for r in items]
            lines.append("")
        return Response("\n".join(lines), media_type="text/markdown")
    body = ['<nav class="crumbs" aria-label="Docs"><a href="/">Home</a></nav>', "<h1>Documentation</h1>"]
    for name, items in sections.items():
        body.append(f'<h2>{html.escape(name.capitalize() or "Pages")}</h2><ul class="index">')
        body += [
            f'<li><a href="{html.escape(r["url"])}">{html.escape(r["title"])}</a>'
            f'<span class="note">{html.escape(r["description"])}</span></li>'
            for r in items
        ]
        body.append("</ul>")
    note = "Pixeltable Cloud documentation, served by the emulator."
    return Response(html.document("Documentation", "".join(body), doc=True, note=note), media_type=html.HTML_TYPE)


def markdown_to_html(title: str, text: str, nav: tuple[str, str] = ("", "")) -> str:
    """Just enough markdown (headings, paragraphs, lists, code blocks, tables as text) to read a page; `nav` is the
    HTML put above and below it."""
    body: list[str] = []
    para: list[str] = []
    in_code = False
    in_list = False

    def flush() -> None:
        nonlocal in_list
        if para:
            body.append(f"<p>{_inline(' '.join(para))}</p>")
            para.clear()
        if in_list:
            body.append("</ul>")
            in_list = False

    for line in _FRONT.sub("", text).splitlines():
        if line.lstrip().startswith("```"):
            flush()
            body.append("</code></pre>" if in_code else "<pre><code>")
            in_code = not in_code
        elif in_code:
            body.append(html.escape(line))
        elif m := re.match(r"(#{1,4}) (.*)", line):
            flush()
            level = len(m.group(1))
            body.append(f"<h{level}>{_inline(m.group(2))}</h{level}>")
        elif m := re.match(r"\s*[-*] (.*)", line):
            if para:
                body.append(f"<p>{_inline(' '.join(para))}</p>")
                para.clear()
            if not in_list:
                body.append("<ul>")
                in_list = True
            body.append(f"<li>{_inline(m.group(1))}</li>")
        elif line.startswith("|"):
            flush()
            body.append(f"<pre>{html.escape(line)}</pre>")
        elif not line.strip():
            flush()
        else:
            para.append(line.strip())
    flush()
    return html.document(
        title,
        nav[0] + "\n".join(body) + nav[1],
        doc=True,
        note="Pixeltable Cloud documentation, served by the emulator.",
    )


def _text(*media_types: str) -> dict[str, openapi.Body]:
    """`opt=` for an answer that is text in each of `media_types` (a page, its markdown twin, a list)."""
    string = openapi.MediaType(schema={"type": "string"})
    return openapi.custom_answer(openapi.Body(dict.fromkeys(media_types, string)))


@route(
    ["/", "/{path:path}"],
    http_method=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"],
    status_code=200,
    media_type=html.HTML_TYPE,
    responses=errors(NOT_FOUND),
    opt=_text(html.HTML_TYPE, "text/markdown"),
)
async def page(
    request: Request[Any, Any, Any],
    accept: Accept = "",
) -> Response[str]:
    site = site_of(request)
    path = request.url.path
    as_markdown = path.endswith(".md") or "text/markdown" in accept
    lookup = path[:-3] if path.endswith(".md") else path
    if lookup.endswith("/index"):
        lookup = lookup[: -len("/index")] or "/"
    lookup = lookup.rstrip("/") or "/"
    readable = request.method in ("GET", "HEAD")
    row = site.docs.page(lookup) if readable else None
    if row is None and readable and lookup == INDEX:  # the folder has no page of its own there
        return docs_index(site.docs.pages(), as_markdown)
    if row is None:
        raise NOT_FOUND(
            f"nothing is served at {path}; the agent endpoints are /ask, /mcp and /health, "
            f"and {INDEX} (or /llms.txt) lists the docs pages",
        )
    body: str = row["body"]
    if as_markdown:
        return Response(body, media_type="text/markdown")
    if body.lstrip().startswith("<"):
        return Response(body, media_type=html.HTML_TYPE)
    nav = _nav(row["url"], site.docs.pages())
    return Response(markdown_to_html(row["title"], body, nav), media_type=html.HTML_TYPE)


@get("/favicon.ico", include_in_schema=False)
async def favicon() -> Response[bytes]:
    return html.favicon()


@get("/llms.txt", media_type="text/plain", opt=_text("text/plain"))
async def llms_txt(request: Request[Any, Any, Any]) -> Response[str]:
    site = site_of(request)
    lines = [
        f"# {site.core.settings.site_name}",
        "",
        "> Pixeltable Cloud documentation, served by the local emulator. Ask questions at /ask or /mcp.",
        "",
        "## Pages",
    ]
    for row in site.docs.pages():
        lines.append(f"- [{row['title']}]({site.base_url}{row['url']}): {row['description']}")
    return Response("\n".join(lines) + "\n", media_type="text/plain")


HANDLERS = [page, llms_txt, favicon]
