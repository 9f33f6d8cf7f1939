"""The flawed twin of careful_agent.py: it hard-codes where the identity provider is instead of reading the
discovery documents, so the scorecard's `hard-coded-url` rule fires and the task's `scorecard_clean` check fails
with that finding as its evidence. Everything else it does is right: the trial is made."""

from __future__ import annotations

import os
import sys

import httpx

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


def main() -> int:
    site, issuer = os.environ["EMULATOR_URL"], os.environ["EMULATOR_AUTH_URL"]  # no discovery: the mistake
    with httpx.Client(trust_env=False, timeout=30) as http:
        registration = http.post(f"{issuer}/agent/identity", json={"type": "anonymous"}).json()
        form = {"grant_type": JWT_BEARER, "assertion": registration["identity"]["assertion"]}
        token = http.post(f"{issuer}/oauth2/token", data=form).json()["access_token"]
        made = http.post(f"{site}/api/v1/trial-orgs", headers={"Authorization": f"Bearer {token}"})
        made.raise_for_status()
        print("trial created:", made.json()["org"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
