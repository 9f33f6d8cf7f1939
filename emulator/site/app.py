"""The site origin `{base_url}`: agent endpoints, docs pages, and the emulator's `/_emulator` API."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Router, get
from litestar.datastructures import State
from litestar.types import ASGIApp, Receive, Scope, Send

from emulator.core import openapi
from emulator.core.boundary import by_path
from emulator.core.faultgate import FaultGate
from emulator.core.webapp import App
from emulator.site import ask, discovery, mcp, pages, trials
from emulator.site.errors import ENVELOPE, EXCEPTION_HANDLERS, boundary_error
from emulator.site.gate import SiteGate
from emulator.site.state import Site


class Health(msgspec.Struct, frozen=True):
    status: str


_OK = Health("ok")
_HEALTHY = msgspec.json.encode(_OK)


@get("/health")
async def health() -> Health:
    # Answered by the same process and loop that serve /ask and /mcp: if this answers, they can. A GET never
    # reaches here (see Liveness); the route stays for the OpenAPI document (and Liveness answers its bytes).
    return _OK


_HEALTH_HEAD = [(b"content-type", b"application/json"), (b"content-length", str(len(_HEALTHY)).encode())]


class Liveness:
    """ASGI: `GET /health` answered before the router, as the same bytes the route gives. Probes (`emulator up`,
    test fixtures, load balancers in CI) call it in tight loops; behind the Host check and the fault rules (a rule
    can still fail it), and without Litestar's routing and response building, it costs what a bare app's does."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/health" and scope["method"] == "GET":
            await send({"type": "http.response.start", "status": 200, "headers": _HEALTH_HEAD})
            await send({"type": "http.response.body", "body": _HEALTHY})
            return
        await self.app(scope, receive, send)


# The site's error bodies as its document shows them: the envelope, the trial endpoint's `{message}`, the claim
# page's HTML, and /mcp's JSON-RPC error.
ERRORS = [ENVELOPE, trials.REFUSAL, trials.PAGE_REFUSAL, mcp.REFUSAL]


def build_site_app(site: Site, mounted: Router, mounted_state: dict[str, object]) -> Any:
    """The site's app, with the operator API (`mounted`, its router) on the same origin: the site knows nothing of
    it but its router and what its handlers read from the app's state (`mounted_state`)."""
    app = App(
        route_handlers=[
            health,
            *ask.HANDLERS,
            *mcp.HANDLERS,
            *discovery.HANDLERS,
            *trials.HANDLERS,
            mounted,
            *pages.HANDLERS,
        ],
        exception_handlers=EXCEPTION_HANDLERS,
        state=State({"site": site, **mounted_state}),
        request_max_body_size=site.core.settings.http_max_body_bytes,  # routes that take archives set their own
        openapi_config=openapi.openapi_config(
            "Pixeltable Cloud emulator: site",
            "The public agent API (/ask, /mcp), discovery, the trial endpoint, docs pages and the emulator's "
            "/_emulator control API.",
            errors=ERRORS,
        ),
        logging_config=None,
        debug=False,
    )
    fast = Liveness(ask.AskFastPath(app, site))  # /health and POST /ask before the router
    # a fault on the trial endpoint answers in that endpoint's format, as its own refusals do
    render = by_path(boundary_error, dict.fromkeys(trials.create_trial.paths, trials.message_bytes))
    faulted = FaultGate(fast, "site", site.core.faults, render)
    return SiteGate(faulted, site.core.settings, site.boundary)
