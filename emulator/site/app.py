"""The site origin `{base_url}`: agent endpoints, docs pages, and the emulator's `/_emulator` API."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Response, get
from litestar.datastructures import State

from emulator.admin import routes as admin
from emulator.core import openapi
from emulator.core.faults import FaultGate
from emulator.core.webapp import App
from emulator.site import ask, discovery, mcp, pages, trials
from emulator.site.errors import EXCEPTION_HANDLERS, error_bytes
from emulator.site.gate import SiteGate
from emulator.site.state import Site

_HEALTHY = msgspec.json.encode({"status": "ok"})


@get("/health")
async def health() -> Response[bytes]:
    # Answered by the same process and loop that serve /ask and /mcp: if this answers, they can.
    return Response(_HEALTHY, media_type="application/json")


def build_site_app(site: Site) -> Any:
    app = App(
        route_handlers=[
            health,
            *ask.HANDLERS,
            *mcp.HANDLERS,
            *discovery.HANDLERS,
            *trials.HANDLERS,
            *admin.HANDLERS,
            *pages.HANDLERS,
        ],
        exception_handlers=EXCEPTION_HANDLERS,
        state=State({"site": site}),
        openapi_config=openapi.openapi_config(
            "Pixeltable Cloud emulator: site",
            "The public agent API (/ask, /mcp), discovery, the trial endpoint, docs pages and the emulator's "
            "/_emulator control API.",
        ),
        logging_config=None,
        debug=False,
    )
    faulted = FaultGate(app, "site", site.core.faults, lambda e: (b"application/json", error_bytes(e)))
    return SiteGate(faulted, site.core.settings, site.boundary)
