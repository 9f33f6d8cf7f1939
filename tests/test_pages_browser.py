"""The person's web pages (agent claim, trial claim, `pxt login`) in a real headless browser: Debian's Chromium,
driven by Playwright with the system browser (no browser is downloaded). Each page is used the way a person
uses it (read, type, click), and its screenshots are checked in the browser itself: drawn, in the product's
colours, and as wide as the window at phone and desktop widths.
"""

from __future__ import annotations

import base64
import re
import shutil
from typing import Any

import httpx
import pytest

from emulator.hosted.logins import CLIENT_ID
from tests.conftest import CHROMIUM, FROZEN_AT, Emulator

READABLE = re.compile(r"\b\d{1,2} [A-Z][a-z]{2} \d{4}, \d\d:\d\d UTC\b")  # html.readable()
RAW_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d")
WIDTHS = (390, 1280)  # a phone and a desktop

pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM), reason="Chromium is not installed")


@pytest.fixture
def e(start_emulator: Any) -> Emulator:
    return start_emulator("--no-watch", "--freeze-clock", FROZEN_AT)


def painted(browser: Any, png: bytes) -> dict[str, int]:
    """What a screenshot shows, counted by the browser: its size, its distinct colours, and how many pixels are the
    pages' accent (#4338ca, the header's mark and the main button)."""
    page = browser.new_page()
    try:
        return page.evaluate(
            """async (src) => {
                const img = new Image(); img.src = src; await img.decode();
                const c = document.createElement('canvas'); c.width = img.width; c.height = img.height;
                const g = c.getContext('2d'); g.drawImage(img, 0, 0);
                const d = g.getImageData(0, 0, c.width, c.height).data;
                const colours = new Set(); let accent = 0;
                for (let i = 0; i < d.length; i += 4) {
                    colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
                    if (Math.abs(d[i] - 0x43) < 10 && Math.abs(d[i + 1] - 0x38) < 10 && Math.abs(d[i + 2] - 0xca) < 10)
                        accent++;
                }
                return {width: c.width, height: c.height, colours: colours.size, accent: accent};
            }""",
            "data:image/png;base64," + base64.b64encode(png).decode(),
        )
    finally:
        page.close()


def check_looks(browser: Any, page: Any, tmp_path: Any, name: str) -> None:
    """At each width: no sideways scrolling, and a screenshot that is really drawn in the pages' style."""
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        assert page.evaluate("document.documentElement.scrollWidth") <= width, f"{name} scrolls sideways at {width}"
        shot = tmp_path / f"{name}-{width}.png"
        page.screenshot(path=str(shot), full_page=True)
        seen = painted(browser, shot.read_bytes())
        assert seen["width"] == width and seen["height"] >= 300, seen
        assert seen["colours"] > 40, seen  # text, borders and the stylesheet's colours, not a blank page
        assert seen["accent"] > 200, seen  # the header's mark (and the main button) in the accent colour


def register(e: Emulator, **body: Any) -> dict[str, Any]:
    r = httpx.post(e.auth + "/agent/identity", json={"type": "anonymous", **body}, timeout=20)
    assert r.status_code == 200, r.text
    return r.json()


def trial_of(e: Emulator, reg: dict[str, Any]) -> dict[str, Any]:
    """The trial an anonymous registration makes: its assertion exchanged for a token, then POST /trial-orgs."""
    token = httpx.post(
        e.auth + "/oauth2/token",
        data={"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": reg["identity"]["assertion"]},
    ).json()["access_token"]
    return httpx.post(e.url + "/api/v1/trial-orgs", headers={"Authorization": f"Bearer {token}"}, timeout=60).json()


def test_a_claim_page_names_the_agent_and_its_deadline_and_approving_shows_the_code(
    browser: Any, e: Emulator, tmp_path: Any
) -> None:
    reg = register(e, type="service_auth", login_hint="dev@example.org")
    page = browser.new_page()
    answer = page.goto(reg["claim"]["attempt"]["verification_uri"])
    assert answer is not None and answer.status == 200
    assert page.inner_text("h1") == "Claim an agent"
    facts = page.inner_text("dl.facts")
    assert reg["id"] in facts and "service_auth" in facts and "Link valid until" in facts
    assert READABLE.search(facts) and not RAW_ISO.search(page.inner_text("body")), facts
    assert page.input_value("input[name=email]") == "dev@example.org"  # the login hint, filled in
    check_looks(browser, page, tmp_path, "claim")

    page.click("button[value=approve]")
    assert page.inner_text("h1") == "Read this code to the agent"
    code = page.inner_text("code.usercode")
    assert re.fullmatch(r"\d{6}", code) and READABLE.search(page.inner_text("p.note"))
    check_looks(browser, page, tmp_path, "claim-code")
    done = httpx.post(
        e.auth + "/agent/identity/claim/complete", json={"claim_token": reg["claim"]["token"], "user_code": code}
    )
    assert done.status_code == 200, done.text

    again = page.goto(reg["claim"]["attempt"]["verification_uri"])  # the link works once
    assert again is not None and again.status == 410
    assert page.inner_text("h1") == "This claim link was already used" and page.query_selector("form") is None
    page.close()


def test_a_claim_is_denied_without_an_email(browser: Any, e: Emulator) -> None:
    reg = register(e)  # an anonymous agent, whose claim names nobody
    started = httpx.post(
        e.auth + "/agent/identity/claim", json={"type": "service_auth", "claim_token": reg["claim"]["token"]}
    )
    assert started.status_code == 200, started.text
    page = browser.new_page()
    page.goto(started.json()["attempt"]["verification_uri"])
    assert page.input_value("input[name=email]") == ""
    page.click("button[value=deny]")  # the e-mail field is required for approving only
    assert page.inner_text("h1") == "Claim denied"
    done = httpx.post(
        e.auth + "/agent/identity/claim/complete", json={"claim_token": reg["claim"]["token"], "user_code": "123456"}
    )
    assert done.status_code == 403 and done.json()["code"] == "claim_denied"
    [denied] = e.journal("idp.claim_denied")
    assert denied["subject"] == reg["id"] and denied["data"]["email"] is None
    assert e.journal("idp.user_created") == []  # nobody signed in to refuse it
    page.close()


def test_an_expired_claim_link_says_so_and_offers_nothing_to_approve(browser: Any, e: Emulator) -> None:
    reg = register(e, type="service_auth", login_hint="late@example.org")
    e.advance("2d")  # past the link's lifetime (claim_ttl, a day)
    page = browser.new_page()
    answer = page.goto(reg["claim"]["attempt"]["verification_uri"])
    assert answer is not None and answer.status == 410
    assert page.inner_text("h1") == "This claim link expired"
    assert READABLE.search(page.inner_text("main")) and page.query_selector("form") is None
    page.close()


def test_the_trial_claim_page_shows_readable_times_and_claims_in_the_browser(
    browser: Any, e: Emulator, tmp_path: Any
) -> None:
    reg = register(e)
    trial = trial_of(e, reg)
    page = browser.new_page()
    answer = page.goto(trial["claim_url"])
    assert answer is not None and answer.status == 200
    assert page.inner_text("h1") == f"Claim {trial['org']}"
    body = page.inner_text("main")
    assert reg["id"] in body and READABLE.search(body) and not RAW_ISO.search(body), body
    check_looks(browser, page, tmp_path, "trial-claim")
    page.fill("input[name=email]", "owner@example.org")
    page.click("button")
    assert page.inner_text("h1") == f"You own {trial['org']}"
    page.close()


def test_the_pxt_login_page_shows_the_code_and_signs_in(browser: Any, e: Emulator, tmp_path: Any) -> None:
    started = httpx.post(e.auth + "/user_management/authorize/device", data={"client_id": CLIENT_ID}).json()
    page = browser.new_page()
    answer = page.goto(started["verification_uri_complete"])
    assert answer is not None and answer.status == 200
    facts = page.inner_text("dl.facts")
    assert started["user_code"] in facts and CLIENT_ID in facts and READABLE.search(facts)
    check_looks(browser, page, tmp_path, "device")
    page.fill("input[name=email]", "dev@example.org")
    page.click("button[value=approve]")
    assert page.inner_text("h1") == "You are signed in"
    grant = {
        "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
        "device_code": started["device_code"],
        "client_id": CLIENT_ID,
    }
    polled = httpx.post(e.auth + "/user_management/authenticate", data=grant)
    assert polled.status_code == 200 and polled.json()["user"]["email"] == "dev@example.org"

    other = httpx.post(e.auth + "/user_management/authorize/device", data={"client_id": CLIENT_ID}).json()
    page.goto(other["verification_uri_complete"])
    page.click("button[value=deny]")  # no e-mail typed
    assert page.inner_text("h1") == "Sign-in denied"
    grant["device_code"] = other["device_code"]
    refused = httpx.post(e.auth + "/user_management/authenticate", data=grant)
    assert refused.status_code == 400 and refused.json()["error"] == "access_denied"
    page.close()


def test_headers_favicon_and_the_identity_providers_front_page(browser: Any, e: Emulator) -> None:
    reg = register(e, type="service_auth", login_hint="dev@example.org")
    for url in (reg["claim"]["attempt"]["verification_uri"], e.url + "/"):  # a person page and a docs page
        kind = httpx.get(url).headers["content-type"]
        assert kind.startswith("text/html") and kind.count("charset") == 1, (url, kind)
    for origin in (e.url, e.auth):
        icon = httpx.get(origin + "/favicon.ico")
        assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
        assert icon.content.startswith(b"<svg")
    page = browser.new_page()
    answer = page.goto(e.auth + "/")
    assert answer is not None and answer.status == 404
    assert page.inner_text("h1") == "Pixeltable Cloud sign-in" and "pxt login" in page.inner_text("main")
    # the icon the page names is the one served, and the browser can draw it
    assert page.evaluate(
        "async () => { const i = new Image(); i.src = '/favicon.ico'; await i.decode(); return i.width; }"
    )
    page.close()
    machine = httpx.get(e.auth + "/", headers={"Accept": "application/json"})
    assert machine.status_code == 404 and machine.json()["code"] == "not_found"
