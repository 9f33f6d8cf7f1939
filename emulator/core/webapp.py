"""The Litestar application class of every origin (site, identity provider, control plane)."""

from __future__ import annotations

from litestar import Litestar
from litestar.plugins import PluginProtocol
from litestar.plugins.core import MsgspecDIPlugin


class App(Litestar):
    """Litestar with msgspec's plugin only: every wire type here is a `msgspec.Struct`. Litestar would also load its
    pydantic and attrs plugins whenever those packages are installed (the test tools install pydantic), which costs
    about 60 ms of each start and the memory of pydantic, for types the emulator never uses."""

    @staticmethod
    def _get_default_plugins(plugins: list[PluginProtocol]) -> list[PluginProtocol]:
        plugins.append(MsgspecDIPlugin())
        return plugins
