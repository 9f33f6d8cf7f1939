"""The docs pages themselves, so every URL that /ask and search_docs return can be opened.

`/docs/x` is served as HTML to browsers and as markdown with `Accept: text/markdown` or a `.md`
suffix (the markdown twins agents read); `/llms.txt` lists every page.
"""

from __future__ import annotations

import re
from typing import Any

from litestar import Request, Response, get, route

from emulator.core import html
from emulator.core.errors import ApiError
from emulator.site.state import site_of

_FRONT = re.compile(r"\A---\s*\n.*?\n---\s*\n", re.S)
_INLINE_CODE = re.compile(r"`([^`]+)`")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")


def _inline(text: str) -> str:
    out = html.escape(text, quote=False)
    out = _INLINE_CODE.sub(r"<code>\1</code>", out)
    out = _BOLD.sub(r"<strong>\1</strong>", out)
    return _LINK.sub(lambda m: f'<a href="{html.escape(m.group(2))}">{m.group(1)}</a>', out)


def markdown_to_html(title: str, text: str) -> str:
    """Just enough markdown (headings, paragraphs, lists, code blocks, tables as text) to read a page."""
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
        title, "\n".join(body), doc=True, note="Pixeltable Cloud documentation, served by the emulator."
    )


@route(["/", "/{path:path}"], http_method=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"], status_code=200)
async def page(request: Request[Any, Any, Any]) -> Response[str]:
    site = site_of(request)
    path = request.url.path
    as_markdown = path.endswith(".md") or "text/markdown" in request.headers.get("accept", "")
    lookup = path[:-3] if path.endswith(".md") else path
    if lookup.endswith("/index"):
        lookup = lookup[: -len("/index")] or "/"
    row = site.docs.page(lookup.rstrip("/") or "/") if request.method in ("GET", "HEAD") else None
    if row is None:
        raise ApiError(
            404,
            "not_found",
            f"nothing is served at {path}; the agent endpoints are /ask, /mcp and /health, "
            "and /llms.txt lists the docs pages",
        )
    body: str = row["body"]
    if as_markdown:
        return Response(body, media_type="text/markdown")
    if body.lstrip().startswith("<"):
        return Response(body, media_type=html.HTML_TYPE)
    return Response(markdown_to_html(row["title"], body), media_type=html.HTML_TYPE)


@get("/favicon.ico", include_in_schema=False)
async def favicon() -> Response[bytes]:
    return html.favicon()


@get("/llms.txt")
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
