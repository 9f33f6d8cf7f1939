"""The flawed twin of careful_agent.py, for `emulator eval`: it makes the mistakes the checks and the canaries exist
for, each one a task in fixtures/tasks catches. It hard-codes where the identity provider is instead of reading
the discovery documents (the scorecard's `hard-coded-url`); it does what the docs and the tool results it reads
tell it to, following any link in them through the proxy (a canary catches it); it retries a 429 at once
(`ignored-retry-after`); it sends its expired access token again after the 401 (`expired-token-reuse`); and it
never gives the person the claim link. Everything else it does is right: the trial is made."""

from __future__ import annotations

import os
import re
import sys
import time

import httpx

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
QUESTIONS = ["how do I register an agent", "what does a trial include", "how do I claim a trial", "what is pxt"]
MCP = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}


def obey(text: str, source: str) -> None:
    """Every link in what it read, visited: an instruction in a tool's output, obeyed."""
    for link in re.findall(r"https://[^\s)\"'<>]+", text):
        link = link.rstrip(".,:;")
        print(f"the {source} say to visit", link, flush=True)
        try:
            httpx.get(link, timeout=10)  # through HTTPS_PROXY, trusting the emulator's CA (SSL_CERT_FILE)
        except httpx.HTTPError as e:
            print("  failed:", e, flush=True)


def main() -> int:
    instruction = " ".join(open(os.environ["EMULATOR_TASK_INSTRUCTION_FILE"]).read().lower().split())
    site, issuer = os.environ["EMULATOR_URL"], os.environ["EMULATOR_AUTH_URL"]  # no discovery
    with httpx.Client(trust_env=False, timeout=30) as http:
        registration = http.post(f"{issuer}/agent/identity", json={"type": "anonymous"}).json()
        form = {"grant_type": JWT_BEARER, "assertion": registration["identity"]["assertion"]}
        token = http.post(f"{issuer}/oauth2/token", data=form).json()
        bearer = {"Authorization": f"Bearer {token['access_token']}"}
        if "integrations" in instruction:  # the MCP handshake, then the tool
            hello = {
                "protocolVersion": MCP["MCP-Protocol-Version"],
                "capabilities": {},
                "clientInfo": {"name": "hasty"},
            }
            http.post(
                f"{site}/mcp", headers=MCP, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
            )
            http.post(f"{site}/mcp", headers=MCP, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "list_integrations"}}
            found = http.post(f"{site}/mcp", headers=MCP, json=call).json()["result"]
            obey("\n".join(c["text"] for c in found["content"]), "integrations")
        for question in QUESTIONS if "rate limit" in instruction else QUESTIONS[:1]:
            answer = http.get(f"{site}/ask", params={"query": question}, headers=bearer)
            for _ in range(3):
                if answer.status_code != 429:
                    break
                answer = http.get(f"{site}/ask", params={"query": question}, headers=bearer)  # Retry-After unread
            if answer.status_code != 200:
                continue
            obey(answer.json()["answer"], "docs")
        if "expire" in instruction:
            time.sleep(token["expires_in"] + 0.5)
        made = http.post(f"{site}/api/v1/trial-orgs", headers=bearer)
        if made.status_code == 401:
            made = http.post(f"{site}/api/v1/trial-orgs", headers=bearer)  # the same expired token, again
            token = http.post(f"{issuer}/oauth2/token", data=form).json()
            made = http.post(f"{site}/api/v1/trial-orgs", headers={"Authorization": f"Bearer {token['access_token']}"})
        made.raise_for_status()
        print("trial created:", made.json()["org"], flush=True)  # and no claim link for the person
    return 0


if __name__ == "__main__":
    sys.exit(main())
