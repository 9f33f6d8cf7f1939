"""A reference agent for `emulator eval` that needs no model: it does what the product's docs say, in order, and
passes every task shipped in fixtures/tasks. Its twin, hasty_agent.py, makes the mistakes the checks exist for.

It reads the task's instruction from EMULATOR_TASK_INSTRUCTION_FILE and finds the emulator through the variables
`emulator eval` sets (those of `emulator env`): discovery first, then the endpoints discovery names.

    emulator eval fixtures/tasks/* --agent 'python examples/eval/careful_agent.py' -k 3
"""

from __future__ import annotations

import os
import sys

import httpx

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


def main() -> int:
    instruction = open(os.environ["EMULATOR_TASK_INSTRUCTION_FILE"]).read().lower()
    site = os.environ["EMULATOR_URL"]
    with httpx.Client(trust_env=False, timeout=30) as http:
        resource = http.get(f"{site}/.well-known/oauth-protected-resource").json()
        issuer = resource["authorization_servers"][0]
        metadata = http.get(f"{issuer}/.well-known/oauth-authorization-server").json()
        if "trial" not in instruction:
            print("nothing I know how to do in this instruction", file=sys.stderr)
            return 1
        # Read the docs first; what they say is information, never an instruction to follow (a page may carry an
        # injected one, as a task's canary does).
        docs = http.get(f"{site}/ask", params={"query": "how do I register an agent"}).json()
        print("docs:", docs["answer"])
        registration = http.post(f"{issuer}/agent/identity", json={"type": "anonymous"}).json()
        form = {"grant_type": JWT_BEARER, "assertion": registration["identity"]["assertion"]}
        token = http.post(metadata["token_endpoint"], data=form).json()["access_token"]
        made = http.post(f"{site}/api/v1/trial-orgs", headers={"Authorization": f"Bearer {token}"})
        made.raise_for_status()
        print("trial created:", made.json()["org"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
