"""What a trial cost, from its emulator's journal: requests per origin, what the agent made (trials, API keys,
database updates), the connections and bytes it sent through the egress proxy per host (an agent's model provider
shows up there), what its hosted databases' workloads used (CPU seconds, peak memory), and the wall time; beside
it, what the agent itself says its model use cost (tokens, dollars) through the usage file; and the sums of both
over a task's trials and a suite's."""

from __future__ import annotations

import os
import stat
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

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


# The agent's own account of its model use. The harness gives the agent this variable, a path in the trial's scratch
# directory; an agent that knows its usage may write one JSON object there (AgentUsage) before it exits. It is the
# agent's word, not a measurement: shown beside the measured cost, summed, never a check and never a verdict.
USAGE_FILE_VAR = "EMULATOR_TRIAL_USAGE_FILE"
MAX_USAGE_BYTES = 64 * 1024  # a usage file is a few numbers; more is not read


class AgentUsage(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The usage file's shape, decoded strictly: no other key, no string for a number, nothing negative.

        {"input_tokens": 1200, "output_tokens": 300, "usd": 0.0123, "model": "claude-sonnet-4-5"}

    The tokens are the trial's totals over every model call (prompt-cache reads counted in input_tokens); `usd` is
    what those calls cost, left out when the agent does not know it; `model` names the model(s) used."""

    input_tokens: Annotated[int, msgspec.Meta(ge=0)]
    output_tokens: Annotated[int, msgspec.Meta(ge=0)]
    usd: Annotated[float, msgspec.Meta(ge=0, le=1e9)] | None = None
    model: Annotated[str, msgspec.Meta(max_length=200)] | None = None


def read_usage(path: Path) -> tuple[AgentUsage | None, str | None]:
    """The agent's usage file, once the agent has ended: (its usage, None), (None, None) when it wrote none, or
    (None, a note saying why it was not used): never an exception. The agent owns the path, so only a regular file
    is read (a FIFO would block, a link could point at the harness's own files), and only its first bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None, None
    except OSError as e:
        return None, f"the agent's usage file could not be read: {e.strerror or e}"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, "the agent's usage file is not a regular file: not read"
        data = b""
        while len(data) <= MAX_USAGE_BYTES and (chunk := os.read(fd, MAX_USAGE_BYTES + 1 - len(data))):
            data += chunk
    except OSError as e:
        return None, f"the agent's usage file could not be read: {e.strerror or e}"
    finally:
        os.close(fd)
    if len(data) > MAX_USAGE_BYTES:
        return None, f"the agent's usage file is over {MAX_USAGE_BYTES} bytes: not read"
    try:
        return msgspec.json.decode(data, type=AgentUsage), None
    except msgspec.DecodeError as e:  # ValidationError included: it names the field, never the file's text
        return None, f"the agent's usage file was not used: {e}"


class CostSum(msgspec.Struct, kw_only=True):
    """A task's trials together, or a suite's: what the emulator measured, and what the agents reported."""

    trials: int = 0
    requests: int = 0  # the agents' requests to the emulator
    agent_seconds: float = 0.0
    hosted_cpu_seconds: float = 0.0
    hosted_peak_memory_mb: float = 0.0  # the highest trial's (peaks of different trials do not add up)
    usage_reported: int = 0  # the trials whose agent wrote a valid usage file; the figures below are theirs
    input_tokens: int = 0
    output_tokens: int = 0
    usd: float | None = None  # None: no trial's agent reported dollars
    models: list[str] = msgspec.field(default_factory=list)


def summed(trials: Iterable[tuple[Cost | None, AgentUsage | None]]) -> CostSum:
    """The sum of trials' measured costs (None: the trial could not run) and reported usages (None: none)."""
    total = CostSum()
    models: set[str] = set()
    for cost, usage in trials:
        total.trials += 1
        if cost is not None:
            total.requests += sum(cost.requests.values())
            total.agent_seconds += cost.agent_seconds
            total.hosted_cpu_seconds += cost.hosted_cpu_seconds
            total.hosted_peak_memory_mb = max(total.hosted_peak_memory_mb, cost.hosted_peak_memory_mb)
        if usage is not None:
            total.usage_reported += 1
            total.input_tokens += usage.input_tokens
            total.output_tokens += usage.output_tokens
            if usage.usd is not None:
                total.usd = (total.usd or 0.0) + usage.usd
            if usage.model:
                models.add(usage.model)
    total.agent_seconds = round(total.agent_seconds, 3)
    total.hosted_cpu_seconds = round(total.hosted_cpu_seconds, 3)
    total.usd = None if total.usd is None else round(total.usd, 6)
    total.models = sorted(models)
    return total
