"""How the control plane's handlers reach the platform: one typed accessor over the app's state."""

from __future__ import annotations

from typing import Any

from litestar import Request

from emulator.hosted.platform import Platform


def platform_of(request: Request[Any, Any, Any]) -> Platform:
    platform = request.app.state["platform"]
    assert isinstance(platform, Platform)
    return platform
