"""The emulator's human-facing pages: plain, accessible HTML forms (sign-in stubs, claim pages)."""

from __future__ import annotations

from html import escape
from urllib.parse import parse_qs

from litestar import Response

_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:34rem;margin:3rem auto;padding:0 1rem;color:#222}"
    "input,button{font-size:1rem;padding:.4rem .6rem;margin:.2rem 0}"
    "code.usercode{font-size:2.2rem;letter-spacing:.3rem;display:block;margin:1rem 0}"
    ".note{color:#666;font-size:.9rem}.error{color:#a00}"
)


def page(title: str, body_html: str, status: int = 200) -> Response[str]:
    """A complete page; `body_html` must already be escaped where it holds user text."""
    html = (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f'<meta name="viewport" content="width=device-width"><style>{_STYLE}</style></head><body>'
        f"<main><h1>{escape(title)}</h1>{body_html}"
        '<p class="note">Pixeltable Cloud emulator: no password is asked; any e-mail signs in.</p>'
        "</main></body></html>"
    )
    return Response(html, status_code=status, media_type="text/html", headers={"Cache-Control": "no-store"})


def hidden(name: str, value: str) -> str:
    return f'<input type="hidden" name="{escape(name)}" value="{escape(value)}">'


def email_input(value: str = "") -> str:
    return (
        f'<label>E-mail <input type="email" name="email" required autocomplete="email" value="{escape(value)}"></label>'
    )


def decision_buttons(approve_label: str) -> str:
    """The person's choice on a sign-in or claim page."""
    return (
        f'<p><button name="decision" value="approve">{escape(approve_label)}</button> '
        '<button name="decision" value="deny">Deny</button></p>'
    )


def form_fields(body: bytes) -> dict[str, str]:
    """A posted form's fields (the first value of each)."""
    return {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}


def approved(fields: dict[str, str]) -> bool:
    return fields.get("decision", "approve") != "deny"
