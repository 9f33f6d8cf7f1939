"""What a trial cost, from its emulator's journal: requests per origin, what the agent made (trials, API keys,
database updates), the connections and bytes it sent through the egress proxy per host (an agent's model provider
shows up there), what its hosted databases' workloads used (CPU seconds, peak memory), and the wall time."""

from __future__ import annotations

from collections import Counter

import msgspec

from emulator.admin.wire import EventView, UsageList


class HostTraffic(msgspec.Struct, kw_only=True):
    host: str
    connections: int
    bytes_up: int
    bytes_down: int


class Cost(msgspec.Struct, kw_only=True):
    seconds: float  # the trial's wall time, its emulator's start and the checks included
    agent_seconds: float  # the agent's command alone
    requests: dict[str, int]  # per origin (site, auth, api, ...)
    trials_created: int
    keys_created: int
    db_updates: int
    egress: list[HostTraffic]  # per host, the most bytes first
    # The hosted workloads the agent's actions started (servers, prepare_project, services, and the process runtime's
    # Postgres), over every database of the trial's emulator, deleted ones included: CPU seconds, and the databases'
    # peak resident memory summed (each database's own peak, not necessarily at the same moment).
    hosted_cpu_seconds: float = 0.0
    hosted_peak_memory_mb: float = 0.0


def cost_of(
    requests: list[EventView],
    events: list[EventView],
    seconds: float,
    agent_seconds: float,
    hosted: UsageList | None = None,
) -> Cost:
    """`requests`: the agent's own (checks.agent_requests); `events`: the whole journal of the trial; `hosted`: what
    its emulator's hosted databases used (GET /_emulator/usage), None for none."""
    kinds = Counter(e.kind for e in events)
    traffic: dict[str, HostTraffic] = {}
    for e in events:
        if e.kind != "proxy.relay":
            continue
        host = str(e.data.get("host", ""))
        seen = traffic.setdefault(host, HostTraffic(host=host, connections=0, bytes_up=0, bytes_down=0))
        seen.connections += 1
        seen.bytes_up += int(e.data.get("bytes_up") or 0)
        seen.bytes_down += int(e.data.get("bytes_down") or 0)
    return Cost(
        seconds=round(seconds, 3),
        agent_seconds=round(agent_seconds, 3),
        requests=dict(Counter(str(e.data.get("origin", "")) for e in requests)),
        trials_created=kinds["trial.created"],
        keys_created=kinds["cloud.key_created"],
        db_updates=kinds["db.update_accepted"],
        egress=sorted(traffic.values(), key=lambda t: -(t.bytes_up + t.bytes_down)),
        hosted_cpu_seconds=hosted.cpu_seconds if hosted else 0.0,
        hosted_peak_memory_mb=hosted.peak_memory_mb if hosted else 0.0,
    )
