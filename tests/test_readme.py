"""The README is the front door: short, the two quick-start commands first, and every link it gives leads somewhere.

What it says at more length lives on the documentation site (docs/); tests/test_docs.py builds the site and runs its
runnable snippets, the README's taste among them.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_the_readme_is_a_front_door_of_at_most_250_lines() -> None:
    assert len(README.splitlines()) <= 250


def test_the_quick_start_is_exactly_the_two_commands_ci_runs() -> None:
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", quick, re.S)
    assert [b.strip() for b in blocks] == [
        "pip install -e . && emulator up",
        "pip install -e '.[test]' && bash scripts/setup-docker.sh && python -m pytest",
    ]
    # .ci/run runs the second one as written
    assert blocks[1].strip() in (ROOT / ".ci" / "run").read_text()


def test_every_link_of_the_readme_leads_to_a_page_of_the_site_or_a_file() -> None:
    links = re.findall(r"\]\(([^)\s]+)\)", README)
    assert len(links) > 20
    nav = (ROOT / "mkdocs.yml").read_text()
    for link in links:
        path, _, anchor = link.partition("#")
        if path.startswith("http"):
            continue
        target = ROOT / path
        assert target.is_file(), link
        if path.startswith("docs/"):  # a page of the site's navigation, not a stray file
            assert path.removeprefix("docs/") in nav, link
        if anchor:  # the heading exists on that page
            headings = {
                re.sub(r"[^a-z0-9 _-]", "", h.lower()).strip().replace(" ", "-")
                for h in re.findall(r"^#+ (.+)$", target.read_text(), re.M)
            }
            assert anchor in headings, link
