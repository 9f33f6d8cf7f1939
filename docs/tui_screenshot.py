"""Make docs/tui.svg: the real dashboard, attached to a real emulator in the middle of an agent flow.

    python docs/tui_screenshot.py

Two agents have registered: one made a trial and a person claimed it, the other made a trial that is
still unclaimed, and a third (service_auth) waits for its person to approve the claim. The emulator
runs with a seed and a frozen clock, so the picture is the same every time.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from emulator.admin.client import Locator  # noqa: E402
from tui.app import Dashboard  # noqa: E402

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


def start(state: Path) -> subprocess.Popen[bytes]:
    ports = [f"--{name}-port" for name in ("site", "auth", "api", "tunnel")]
    argv = [sys.executable, "-m", "emulator", "up", *(x for p in ports for x in (p, "0")), "--no-watch"]
    argv += ["--state-dir", str(state), "--seed", "2026", "--freeze-clock", "2026-11-01T09:00:00Z"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            if json.loads((state / "endpoints.json").read_text()).get("pid") == proc.pid:
                return proc
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise SystemExit("the emulator did not start")


def agent_flow(state: Path) -> None:
    ep = json.loads((state / "endpoints.json").read_text())
    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.42.0.2"), timeout=20) as c:

        def trial() -> dict[str, str]:
            reg = c.post(ep["auth"] + "/agent/identity", json={"type": "anonymous"}).json()
            form = {"grant_type": JWT_BEARER, "assertion": reg["identity"]["assertion"]}
            token = c.post(ep["auth"] + "/oauth2/token", data=form).json()["access_token"]
            headers = {"Authorization": f"Bearer {token}"}
            return c.post(ep["site"] + "/api/v1/trial-orgs", headers=headers).json()

        claimed = trial()
        c.post(ep["site"] + "/_emulator/trials/claim", json={"org": claimed["org"], "email": "maria@example.org"})
        c.post(ep["site"] + "/_emulator/clock", json={"advance": "5h12m"})
        trial()
        c.post(ep["auth"] + "/agent/identity", json={"type": "service_auth", "login_hint": "lead@example.org"})


async def shoot(state: Path) -> str:
    app = Dashboard(Locator(state_dir=state), label="http://127.0.0.1:8700")
    app.animation_level = "none"
    async with app.run_test(size=(170, 20)) as pilot:
        while not (app.connection == "live" and len(app.model.registrations) == 3 and app.model.claims):
            await pilot.pause(0.05)
        await pilot.pause(0.2)
        return app.export_screenshot(title="emulator tui")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        proc = start(state)
        try:
            agent_flow(state)
            (ROOT / "docs" / "tui.svg").write_text(asyncio.run(shoot(state)))
        finally:
            proc.terminate()
            proc.wait(15)
    print(ROOT / "docs" / "tui.svg")


if __name__ == "__main__":
    main()
