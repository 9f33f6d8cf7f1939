"""Pages in a real headless browser (Debian's Chromium through Playwright, as tests/test_pages_browser.py): the claim
pages at a phone's width, where e-mails and ids wrap only between their parts and nothing scrolls sideways, and the
docs index at `/docs` with the way around the docs pages (home, index, previous, next).
"""

from __future__ import annotations

import shutil
from typing import Any

import httpx
import pytest

from tests.conftest import CHROMIUM, FROZEN_AT, Emulator
from tests.test_pages_browser import register, trial_of

pytestmark = pytest.mark.skipif(not shutil.which(CHROMIUM), reason="Chromium is not installed")

PHONE = 390
# Long enough that it cannot fit one line of a phone: it has to wrap, and may only do so after a separator.
EMAIL = "firstname.lastname-with-a-long-suffix@engineering.example-company.org"
SEPARATORS = "@._/-"

# For each occurrence of `needle` in the text of `root`: the characters after which its lines break (text nodes are
# walked, as a `<wbr>` splits a value into several), measured from the line boxes Chromium drew.
LINE_BREAKS = """([root, needle]) => {
    const nodes = [], walker = document.createTreeWalker(document.querySelector(root), NodeFilter.SHOW_TEXT);
    let text = '';
    while (walker.nextNode()) { nodes.push([walker.currentNode, text.length]); text += walker.currentNode.data; }
    const at = (i) => {
        let k = nodes.length - 1;
        while (nodes[k][1] > i) k--;
        const r = document.createRange();
        r.setStart(nodes[k][0], i - nodes[k][1]); r.setEnd(nodes[k][0], i - nodes[k][1] + 1);
        return r.getClientRects()[0];
    };
    const found = [];
    for (let s = text.indexOf(needle); s >= 0; s = text.indexOf(needle, s + 1)) {
        const breaks = [];
        for (let i = s + 1; i < s + needle.length; i++)
            if (at(i).top > at(i - 1).top + 2) breaks.push(text[i - 1]);
        found.push(breaks);
    }
    return found;
}"""

# Elements of <main> whose box reaches past main's, or whose content is wider than their box without scrolling it.
OVERFLOWING = """() => {
    const main = document.querySelector('main').getBoundingClientRect();
    return [...document.querySelectorAll('main *')].filter((el) => {
        const r = el.getBoundingClientRect(), style = getComputedStyle(el);
        // a text field scrolls its own value
        const scrolls = ['auto', 'scroll'].includes(style.overflowX) || el.tagName === 'INPUT';
        return r.right > main.right + 0.5 || (!scrolls && el.scrollWidth > el.clientWidth + 1 && el.clientWidth > 0);
    }).map((el) => el.outerHTML.slice(0, 80));
}"""


@pytest.fixture
def e(start_emulator: Any) -> Emulator:
    return start_emulator("--no-watch", "--freeze-clock", FROZEN_AT)


def phone(browser: Any) -> Any:
    return browser.new_page(viewport={"width": PHONE, "height": 800})


def assert_fits_and_wraps_between_parts(page: Any, *values: str) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE, "the page scrolls sideways"
    assert page.evaluate(OVERFLOWING) == []
    for value in values:
        occurrences = page.evaluate(LINE_BREAKS, ["main", value])
        assert occurrences, f"{value} is not on the page"
        for breaks in occurrences:
            assert all(c in SEPARATORS for c in breaks), f"{value} breaks mid-word (after {breaks})"


def test_the_agent_claim_page_wraps_an_email_and_an_id_between_their_parts_on_a_phone(
    browser: Any, e: Emulator
) -> None:
    reg = register(e, type="service_auth", login_hint=EMAIL)
    page = phone(browser)
    page.goto(reg["claim"]["attempt"]["verification_uri"])
    assert page.inner_text("h1") == "Claim an agent"
    assert_fits_and_wraps_between_parts(page, EMAIL, reg["id"])
    # the e-mail is long enough that it does wrap: the check above had line breaks to look at
    assert any(page.evaluate(LINE_BREAKS, ["main", EMAIL]))
    page.close()


def test_the_trial_claim_page_wraps_an_email_and_an_id_between_their_parts_on_a_phone(
    browser: Any, e: Emulator
) -> None:
    reg = register(e)
    trial = trial_of(e, reg)
    page = phone(browser)
    page.goto(trial["claim_url"])
    assert page.inner_text("h1") == f"Claim {trial['org']}"
    assert_fits_and_wraps_between_parts(page, reg["id"], trial["org"])
    page.fill("input[name=email]", EMAIL)
    page.click("button")
    assert page.inner_text("h1") == f"You own {trial['org']}"
    assert_fits_and_wraps_between_parts(page, EMAIL)
    assert any(page.evaluate(LINE_BREAKS, ["main", EMAIL]))
    page.close()


def test_docs_index_lists_every_page_and_pages_lead_home_to_the_index_and_to_their_neighbours(
    browser: Any, e: Emulator
) -> None:
    listed = [
        line.split("](")[1].split(")")[0].removeprefix(e.url)
        for line in httpx.get(e.url + "/llms.txt").text.splitlines()
        if line.startswith("- [")
    ]
    docs = [url for url in listed if url != "/"]
    page = browser.new_page()
    for where in ("/docs", "/docs/"):
        answer = page.goto(e.url + where)
        assert answer is not None and answer.status == 200
        assert answer.headers["content-type"].startswith("text/html")
        assert page.inner_text("h1") == "Documentation"
        links = page.eval_on_selector_all("ul.index a", "as => as.map(a => a.getAttribute('href'))")
        assert sorted(links) == sorted(docs)  # every page, once
    # the index's order is the order previous/next walk; follow "Next" from the first page to the last
    order = page.eval_on_selector_all("ul.index a", "as => as.map(a => a.getAttribute('href'))")
    page.click("ul.index a >> nth=0")
    assert page.url == e.url + order[0] and page.query_selector("nav.pager a[rel=prev]") is None
    for i, url in enumerate(order[1:4], start=1):
        page.click("nav.pager a[rel=next]")
        assert page.url == e.url + url
        assert page.get_attribute("nav.pager a[rel=prev]", "href") == order[i - 1]
    page.goto(e.url + order[-1])
    assert page.query_selector("nav.pager a[rel=next]") is None
    assert page.get_attribute("nav.pager a[rel=prev]", "href") == order[-2]
    page.click("nav.crumbs >> text=All docs")
    assert page.url == e.url + "/docs" and page.inner_text("h1") == "Documentation"
    page.goto(e.url + order[5])
    page.click("nav.crumbs >> text=Home")
    assert page.url == e.url + "/" and page.inner_text("h1") == "Pixeltable Cloud documentation"
    page.close()
    # agents get the index as markdown, as they get the pages; anything else under /docs stays a 404
    md = httpx.get(e.url + "/docs", headers={"Accept": "text/markdown"})
    assert md.status_code == 200 and md.headers["content-type"].startswith("text/markdown")
    assert all(f"]({url})" in md.text for url in docs)
    assert httpx.get(e.url + "/docs/nowhere").status_code == 404
