"""A small agent that gets itself a Pixeltable Cloud trial and uses it, written the way the spec asks of a
well-behaved client; its tests (tests/) run it against the emulator with nothing but the pytest plugin.

What it does: read the discovery documents (never a hard-coded identity-provider URL), register anonymously,
exchange the identity assertion for an access token (and again when the token expires: a 401), create one
trial, and call the control plane with the trial's key. A 429 or 503 is retried after `Retry-After` seconds,
a few times, then given up; a registration that already has a trial (409) or was claimed (403) is not asked
for another.

    python agent.py https://127.0.0.1:8700      # or PIXELTABLE_SITE_URL from `emulator env`
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
RETRYABLE = (429, 503)


class AgentError(Exception):
    """The agent cannot go on: why, and the HTTP status that said so."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Trial:
    org: str
    db: str
    api_key: str
    api_url: str
    claim_url: str
    expires_at: str


class TrialAgent:
    def __init__(
        self,
        site_url: str,
        *,
        sleep: Callable[[float], None] = time.sleep,
        attempts: int = 3,
        http: httpx.Client | None = None,
    ) -> None:
        self.site = site_url.rstrip("/")
        self.sleep = sleep  # tests pass their own, so a Retry-After of minutes costs no time
        self.attempts = attempts
        self.http = http or httpx.Client(timeout=30)
        self.metadata: dict[str, Any] = {}
        self.registration: dict[str, Any] = {}
        self.access_token: str | None = None
        self.trial: Trial | None = None

    # -- identity

    def discover(self) -> dict[str, Any]:
        if not self.metadata:
            resource = self._send("GET", f"{self.site}/.well-known/oauth-protected-resource").json()
            issuer = resource["authorization_servers"][0]
            self.metadata = self._send("GET", f"{issuer}/.well-known/oauth-authorization-server").json()
        return self.metadata

    def register(self) -> dict[str, Any]:
        if not self.registration:
            identity_endpoint = self.discover()["agent_auth"]["identity_endpoint"]
            self.registration = self._send("POST", identity_endpoint, json={"type": "anonymous"}).json()
        return self.registration

    def token(self, renew: bool = False) -> str:
        """An access token, from the cache unless `renew`: exchanged from the registration's identity assertion."""
        if self.access_token is None or renew:
            assertion = self.register()["identity"]["assertion"]
            answer = self._send(
                "POST", self.discover()["token_endpoint"], data={"grant_type": JWT_BEARER, "assertion": assertion}
            )
            self.access_token = answer.json()["access_token"]
        return self.access_token

    # -- the trial

    def ensure_trial(self) -> Trial:
        """The agent's trial: made once; a second ask would only be refused."""
        if self.trial is not None:
            return self.trial
        url = f"{self.site}/api/v1/trial-orgs"
        r = self._send("POST", url, headers=self._bearer(), allow={401, 403, 409})
        if r.status_code == 401:  # the token expired: exchange the assertion again (never register again)
            r = self._send("POST", url, headers=self._bearer(renew=True), allow={403, 409})
        if r.status_code in (403, 409):
            raise AgentError(r.json().get("message", r.text), r.status_code)
        t = r.json()
        self.trial = Trial(t["org"], t["db"], t["api_key"], t["api_url"], t["claim_url"], t["expires_at"])
        return self.trial

    def list_orgs(self) -> list[str]:
        """The organizations the trial's key can see (the control plane's `list_orgs`)."""
        trial = self.ensure_trial()
        r = self._send(
            "POST", trial.api_url, json={"operation_type": "list_orgs"}, headers={"X-api-key": trial.api_key}
        )
        return [o["org"] for o in r.json()["orgs"]]

    def ask(self, question: str) -> list[str]:
        """The site's `/ask`: the URLs of the docs that answer the question."""
        r = self._send("POST", f"{self.site}/ask", json={"query": question})
        return [result["url"] for result in r.json()["results"]]

    # -- one request, retried the way the spec says

    def _bearer(self, renew: bool = False) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(renew)}"}

    def _send(self, method: str, url: str, allow: set[int] | frozenset[int] = frozenset(), **kw: Any) -> httpx.Response:
        for attempt in range(1, self.attempts + 1):
            r = self.http.request(method, url, **kw)
            if r.status_code < 400 or r.status_code in allow:
                return r
            wait = r.headers.get("Retry-After")
            if r.status_code in RETRYABLE and wait is not None and wait.isdigit() and attempt < self.attempts:
                self.sleep(int(wait))
                continue
            raise AgentError(f"{method} {url}: {r.status_code} {_message(r)}", r.status_code)
        raise AssertionError("unreachable")


def _message(r: httpx.Response) -> str:
    try:
        body = r.json()
    except ValueError:
        return r.text[:200]
    if isinstance(body, dict):
        error = body.get("error")
        return str(body.get("message") or (error.get("message") if isinstance(error, dict) else error) or body)
    return str(body)


if __name__ == "__main__":
    agent = TrialAgent(sys.argv[1] if len(sys.argv) > 1 else os.environ["PIXELTABLE_SITE_URL"])
    trial = agent.ensure_trial()
    print(f"trial pxt://{trial.org}:{trial.db} until {trial.expires_at}; a person claims it at {trial.claim_url}")
    print(f"organizations its key sees: {agent.list_orgs()}")
