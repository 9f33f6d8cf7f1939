"""The person an agent works for, played during a trial: they read what the agent tells them (its output, as it is
written) and act on it as they would in a browser. Today that is the trial's claim link: they open it and claim
the organization with their e-mail, through the claim page's own form."""

from __future__ import annotations

import re
from pathlib import Path

import httpx


class Person:
    def __init__(self, email: str, site: str, address: str | None = None) -> None:
        self.email = email
        self.address = address  # the source address their browser sends from: their requests are told apart by it
        self.site = site.rstrip("/")
        self._links = re.compile(re.escape(self.site) + r"/claim/[A-Za-z0-9_\-]+")
        self.acts: list[str] = []  # what they did, in order, as the trial's result shows it
        self._seen: set[str] = set()
        self._read = 0

    def read(self, output: Path) -> None:
        """Act on what the agent wrote since the last read (a link is followed once)."""
        try:
            with open(output, "rb") as f:
                f.seek(self._read)
                new = f.read()
        except OSError:
            return
        cut = new.rfind(b"\n") + 1  # a line still being written is read whole next time
        self._read += cut
        for link in self._links.findall(new[:cut].decode(errors="replace")):
            if link not in self._seen:
                self._seen.add(link)
                self._claim(link)

    def _claim(self, link: str) -> None:
        # As a browser: the page, then its form, sent with the page's origin (the site refuses cross-site posts).
        transport = httpx.HTTPTransport(local_address=self.address) if self.address else None
        with httpx.Client(trust_env=False, timeout=30, transport=transport) as browser:
            shown = browser.get(link)
            if shown.status_code != 200:
                self.acts.append(f"opened {link}: {shown.status_code}, nothing to claim")
                return
            sent = browser.post(link, data={"email": self.email}, headers={"Origin": self.site})
        self.acts.append(f"claimed {link} as {self.email}: {sent.status_code}")
