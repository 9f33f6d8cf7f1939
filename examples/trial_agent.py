"""An agent with no account gets a Pixeltable Cloud trial, the way the product's docs describe it.

discover → register (anonymous) → exchange the assertion for an access token → create the trial →
a person claims it (here through the emulator's human endpoint, as if they opened claim_url) → the
registration, now claimed, gets 403 for another trial.

Run `emulator up`, then `python examples/trial_agent.py`. Needs httpx (`pip install httpx`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import httpx

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


def site_url() -> str:
    if os.environ.get("PIXELTABLE_SITE_URL"):
        return os.environ["PIXELTABLE_SITE_URL"].rstrip("/")
    state = Path(os.environ.get("EMULATOR_STATE_DIR", Path.home() / ".local/state/pxt-emulator"))
    return json.loads((state / "endpoints.json").read_text())["site"]


def step(title: str) -> None:
    print(f"\n== {title}")


def main(email: str = "person@example.org") -> int:
    site = site_url()
    http = httpx.Client(timeout=30)

    step("discover")
    resource = http.get(f"{site}/.well-known/oauth-protected-resource").json()
    issuer = resource["authorization_servers"][0]
    metadata = http.get(f"{issuer}/.well-known/oauth-authorization-server").json()
    assert metadata["issuer"] == issuer, "the issuer must match byte for byte"
    register_at = metadata["agent_auth"]["identity_endpoint"]
    print(f"resource {resource['resource']} trusts {issuer}; agents register at {register_at}")

    step("register anonymously")
    registration = http.post(register_at, json={"type": "anonymous"}).json()
    print(f"registration {registration['id']}, scopes before a claim: {registration['scopes']['pre_claim']}")

    step("exchange the identity assertion for an access token")
    token = http.post(
        metadata["token_endpoint"],
        data={"grant_type": JWT_BEARER, "assertion": registration["identity"]["assertion"]},
    ).json()
    print(f"access token for {token['expires_in']} s, scope {token['scope']!r}")
    bearer = {"Authorization": f"Bearer {token['access_token']}"}

    step("create the trial")
    created = http.post(f"{site}/api/v1/trial-orgs", headers=bearer)
    created.raise_for_status()
    trial = created.json()
    print(f"pxt://{trial['org']}:{trial['db']} until {trial['expires_at']}; control plane {trial['api_url']}")
    print(f"claim link (for the person): {trial['claim_url']}")
    orgs = http.post(trial["api_url"], json={"operation_type": "list_orgs"}, headers={"X-api-key": trial["api_key"]})
    print(f"the trial's API key works: {[o['org'] for o in orgs.json()['orgs']]}")

    step(f"a person ({email}) claims it")
    claimed = http.post(f"{site}/_emulator/trials/claim", json={"org": trial["org"], "email": email}).json()
    print(f"{claimed['org']} is now {claimed['state']}")

    step("the claimed registration asks for another trial")
    again = http.post(f"{site}/api/v1/trial-orgs", headers=bearer)
    print(f"HTTP {again.status_code}: {again.json()['message']}")
    return 0 if again.status_code == 403 else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
