"""The emulator's human-facing pages, one home for both origins (site and identity provider): the page shell with
its one small stylesheet, escaping, instants shown to people, the favicon, and the form parts of the sign-in and
claim pages.

Pages are server-rendered HTML that needs no JavaScript; every value put into a page goes through `escape`.
"""

from __future__ import annotations

import html as _html
import re
from datetime import UTC, datetime
from urllib.parse import parse_qs

from litestar import Response

from emulator.core.clock import iso

# `text/html` is given to Litestar bare: it appends `; charset=utf-8` itself (once).
HTML_TYPE = "text/html"

# The favicon, also drawn in each page's header: served at `/favicon.ico` on the site and identity origins.
FAVICON_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32" width="32" height="32">'
    '<rect width="32" height="32" rx="7" fill="#4338ca"/>'
    '<rect x="7" y="7" width="8" height="8" rx="1.5" fill="#ffffff"/>'
    '<rect x="17" y="7" width="8" height="8" rx="1.5" fill="#a5b4fc"/>'
    '<rect x="7" y="17" width="8" height="8" rx="1.5" fill="#a5b4fc"/>'
    '<rect x="17" y="17" width="8" height="8" rx="1.5" fill="#ffffff"/></svg>'
)
FAVICON_TYPE = "image/svg+xml"

# The one stylesheet of every page (inline: a page is a single request).
STYLESHEET = (
    ":root{--ink:#1d2330;--muted:#5d6678;--line:#dde2eb;--bg:#f3f5f9;--card:#fff;--accent:#4338ca;"
    "--accent-ink:#fff;--danger:#b42318;--danger-bg:#fef3f2;--code-bg:#eef0f7;--radius:12px;"
    '--font:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;'
    '--mono:ui-monospace,"SFMono-Regular","DejaVu Sans Mono",monospace;color-scheme:light}'
    "*{box-sizing:border-box}"
    "body{margin:0;background:var(--bg);color:var(--ink);font:16px/1.55 var(--font)}"
    "header{display:flex;align-items:center;gap:.6rem;padding:.9rem 1.5rem;background:var(--card);"
    "border-bottom:1px solid var(--line);font-weight:600}"
    "header svg{width:26px;height:26px;display:block}"
    ".tag{font-size:.72rem;font-weight:600;text-transform:uppercase;letter-spacing:.06em;color:var(--accent);"
    "border:1px solid currentColor;border-radius:999px;padding:.05rem .5rem}"
    "main{max-width:36rem;margin:2.5rem auto;padding:2rem 2.25rem;background:var(--card);"
    "border:1px solid var(--line);border-radius:var(--radius);box-shadow:0 1px 3px rgba(16,24,40,.06)}"
    "main.doc{max-width:48rem}"
    "h1{font-size:1.5rem;line-height:1.25;margin:0 0 1rem}"
    "a{color:var(--accent)}"
    "dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:.35rem 1.25rem;margin:1.25rem 0;"
    "padding:1rem 1.25rem;background:var(--bg);border-radius:8px}"
    # A value breaks where `wrappable` lets it (after a separator) and a piece that still cannot fit scrolls inside
    # its own box: never mid-word, never the page sideways.
    "dl.facts dt{color:var(--muted)}dl.facts dd{margin:0;min-width:0;overflow-x:auto}"
    "label{display:block;font-weight:600;margin-top:1rem}"
    "input{display:block;width:100%;font:inherit;font-weight:400;padding:.55rem .75rem;margin-top:.35rem;"
    "border:1px solid var(--line);border-radius:8px;background:#fff;color:inherit}"
    "input:focus{outline:2px solid var(--accent);outline-offset:1px}"
    ".actions{display:flex;flex-wrap:wrap;gap:.6rem;margin-top:1.4rem}"
    "button{font:inherit;font-weight:600;padding:.55rem 1.15rem;border-radius:8px;cursor:pointer;"
    "border:1px solid var(--accent);background:var(--accent);color:var(--accent-ink)}"
    "button.secondary{background:var(--card);color:var(--ink);border-color:var(--line)}"
    "code,pre{font-family:var(--mono);font-size:.92em}"
    "code{background:var(--code-bg);padding:.1rem .35rem;border-radius:4px}"
    "pre{background:var(--code-bg);padding:.8rem 1rem;border-radius:8px;overflow-x:auto}"
    "pre code{background:none;padding:0}"
    "code.usercode{display:block;text-align:center;font-size:2.4rem;letter-spacing:.35rem;margin:1rem 0;"
    "padding:1rem}"
    ".note{color:var(--muted);font-size:.9rem}"
    ".error{color:var(--danger);background:var(--danger-bg);border:1px solid #fecdca;border-radius:8px;"
    "padding:.6rem .85rem}"
    "footer{text-align:center;color:var(--muted);font-size:.85rem;margin:0 1rem 2rem}"
    "nav.crumbs{display:flex;flex-wrap:wrap;gap:1rem;font-size:.9rem;margin:0 0 1.25rem}"
    "nav.pager{display:flex;flex-wrap:wrap;justify-content:space-between;gap:1rem;margin-top:2rem;"
    "padding-top:1rem;border-top:1px solid var(--line)}"
    "nav.pager a{display:flex;flex-direction:column;text-decoration:none}nav.pager a[rel=next]{margin-left:auto;"
    "text-align:right}nav.pager span{color:var(--muted);font-size:.8rem}"
    "ul.index{padding-left:1.1rem}ul.index li{margin:.35rem 0}ul.index .note{display:block}"
    # A phone: the card fills the width, and a fact's value goes under its name (beside it, a long id or e-mail
    # would get a sliver of the width).
    "@media (max-width:32rem){main{margin:1rem .5rem;padding:1.25rem 1rem}"
    "dl.facts{grid-template-columns:1fr;gap:0}dl.facts dd{margin-bottom:.6rem}}"
)

NOTE = "Pixeltable Cloud emulator: no password is asked; any e-mail signs in."
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def escape(value: object, quote: bool = True) -> str:
    """`value` as text safe anywhere in a page (quotes too, for attributes, unless `quote` is False)."""
    return _html.escape(str(value), quote)


def readable(ts: float) -> str:
    """An instant as a person reads it: `24 Nov 2026, 14:05 UTC` (the same in every locale)."""
    t = datetime.fromtimestamp(ts, UTC)
    return f"{t.day} {_MONTHS[t.month - 1]} {t.year}, {t:%H:%M} UTC"


def when(ts: float) -> str:
    """An instant for a page: readable, with its RFC 3339 value in the `datetime` attribute."""
    return f'<time datetime="{iso(ts)}">{readable(ts)}</time>'


def document(title: str, main_html: str, *, doc: bool = False, note: str = NOTE) -> str:
    """A complete HTML document in the shell; `main_html` must already be escaped where it holds any value."""
    main_open = '<main class="doc">' if doc else "<main>"
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f'<title>{escape(title)}</title><link rel="icon" href="/favicon.ico" type="{FAVICON_TYPE}">'
        f"<style>{STYLESHEET}</style></head><body>"
        f'<header>{FAVICON_SVG}<span>Pixeltable Cloud</span><span class="tag">emulator</span></header>'
        f"{main_open}{main_html}</main>"
        f"<footer>{escape(note)}</footer></body></html>"
    )


_TEXT = re.compile(r">([^<]+)<")  # the text between two tags (values are escaped: no `<` or `>` in them)
_LONG = re.compile(r"\S{12,}")  # a token that may not fit a phone's line: an e-mail, an id, a URL
_AFTER_SEPARATOR = re.compile(r"(?<=[@._/])(?=\S)")  # after a separator, where more of the token follows


def wrappable(body_html: str) -> str:
    """`body_html` with a line break allowed (`<wbr>`) after each `@`, `.`, `_` and `/` of its long tokens, so a
    narrow screen wraps `dev@example.org` or `agent_reg_2G67…` between its parts, never inside one (a hyphen
    already allows a break). Text only: tags and attribute values, such as an input's e-mail, are left alone."""

    def text(m: re.Match[str]) -> str:
        return ">" + _LONG.sub(lambda t: _AFTER_SEPARATOR.sub("<wbr>", t.group()), m.group(1)) + "<"

    return _TEXT.sub(text, body_html)


def page(title: str, body_html: str, status: int = 200) -> Response[str]:
    """A person's page: `title` as its heading, then `body_html` (already escaped where it holds any value)."""
    return Response(
        document(title, f"<h1>{escape(title)}</h1>{wrappable(body_html)}"),
        status_code=status,
        media_type=HTML_TYPE,
        headers={"Cache-Control": "no-store"},
    )


def gone(title: str, text: str, next_html: str) -> Response[str]:
    """410 for a link or code that no longer takes a decision: why (`text`), and what to do instead (`next_html`)."""
    return page(title, f"<p>{escape(text)}</p><p>{next_html}</p>", 410)


def favicon() -> Response[bytes]:
    return Response(FAVICON_SVG.encode(), media_type=FAVICON_TYPE, headers={"Cache-Control": "public, max-age=86400"})


def error_box(message: str) -> str:
    return f'<p class="error" role="alert">{escape(message)}</p>'


def facts(rows: list[tuple[str, str]]) -> str:
    """A definition list; each value must already be HTML (escaped)."""
    return '<dl class="facts">' + "".join(f"<dt>{escape(k)}</dt><dd>{v}</dd>" for k, v in rows) + "</dl>"


def hidden(name: str, value: str) -> str:
    return f'<input type="hidden" name="{escape(name)}" value="{escape(value)}">'


def email_input(value: str = "") -> str:
    return (
        '<label>Your e-mail <input type="email" name="email" required autocomplete="email" '
        f'placeholder="you@example.com" value="{escape(value)}"></label>'
    )


def decision_buttons(approve_label: str) -> str:
    """The person's choice on a sign-in or claim page: approving needs the e-mail (who approves), denying does
    not (`formnovalidate`: a person must be able to refuse an agent they do not know without signing in)."""
    return (
        f'<div class="actions"><button name="decision" value="approve">{escape(approve_label)}</button>'
        '<button class="secondary" name="decision" value="deny" formnovalidate>Deny</button></div>'
    )


def form_fields(body: bytes) -> dict[str, str]:
    """A posted form's fields (the first value of each)."""
    return {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}


def approved(fields: dict[str, str]) -> bool:
    return fields.get("decision", "approve") != "deny"
