"""How an agent behaved: who it is in the journal (agents), what it did (traces), what it did wrong
(scorecard). Reads the journal only; knows no web framework."""

from __future__ import annotations

from typing import TYPE_CHECKING

from emulator.behaviour.agents import Journal

if TYPE_CHECKING:
    from emulator.core.context import Core

_PAGE = 5000


async def read_journal(core: Core) -> Journal:
    """The whole journal (it holds the last `journal_cap` events), indexed."""
    events, since = [], 0
    while True:
        page = await core.bus.history(since, (), limit=_PAGE)
        events += page
        if len(page) < _PAGE:
            return Journal(events)
        since = page[-1].seq
