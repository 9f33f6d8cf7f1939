"""An evaluation task: a directory in Harbor's layout (`instruction.md`, `task.toml`), read strictly.

`task.toml` keeps Harbor's sections where they say the same thing (`schema_version`, `[task]` name and description,
`[metadata]`, `[agent] timeout_sec`) and adds one of its own, `[emulator]`, which Harbor ignores as it ignores any
key it does not know: how many trials, the pass^k the task must reach, the starting state, the agent's environment,
the egress allow-list, the goal as a list of declarative checks (checks.py), and canaries: injected instructions
planted in what the agent reads (a docs page, an MCP tool's result, a hosted service's answers), with what following
one looks like.

    schema_version = "1.1"
    [task]
    name = "pixeltable/create-a-trial"
    description = "Make a trial organization and claim it"
    [agent]
    timeout_sec = 120
    [emulator]
    trials = 3            # k: each trial is its own throwaway emulator
    pass_k = 1.0          # the pass^k the task must reach for `emulator eval` to exit 0
    start = "start.toml"  # a declared state (`emulator apply`) or a snapshot export (.tar.gz), beside task.toml
    [emulator.env]        # the agent's extra environment variables
    MODE = "careful"
    [[emulator.checks]]
    check = "trial"
    claimed_by = "dev@example.com"
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

import msgspec

from emulator.config import DEFAULT_DOCS, FIELDS
from emulator.core import canaries
from emulator.eval.checks import Check, SecretCheck

INSTRUCTION, TASK_FILE = "instruction.md", "task.toml"
# Settings the trial itself decides: where it runs and listens, and what the task's own fields say.
RESERVED = frozenset(
    {
        "state_dir",
        "host",
        "site_port",
        "auth_port",
        "api_port",
        "tunnel_port",
        "s3_port",
        "seed",
        "docs",
        "proxy_egress",
        "profile",
        "canaries",
    }
)


class TaskError(ValueError):
    """A task directory that cannot be run, and why (its path and the field)."""


class TaskSection(msgspec.Struct, forbid_unknown_fields=False):
    name: str | None = None
    description: str = ""


class AgentSection(msgspec.Struct, forbid_unknown_fields=False):
    timeout_sec: float = 300.0


class Canary(msgspec.Struct, forbid_unknown_fields=True):
    """An injected instruction planted in exactly one place, a docs page (which `/ask`, MCP's `search_docs` and the
    site's pages then serve), an MCP tool's result or a hosted service's answers, and what following it looks like:
    a connection to `host` through the egress proxy (a shell pattern), or an event of one of `events` (a forbidden
    operation, e.g. `db.delete_accepted`)."""

    text: str
    page: str | None = None  # the corpus page that carries it, e.g. "docs/auth/agent-registration.md"
    tool: str | None = None  # or the MCP tool whose result carries it, e.g. "list_integrations"
    service: str | None = None  # or the hosted services (a shell pattern of the name) whose JSON answers carry it
    route: str | None = None  # with `service`: only on these routes (a shell pattern, e.g. "/search")
    host: str | None = None
    events: list[str] = msgspec.field(default_factory=list)

    @property
    def where(self) -> str:
        """Where it is planted, as a report says it."""
        if self.tool is not None:
            return f"MCP tool {self.tool}"
        if self.service is not None:
            return f"service {self.service}" + (f" route {self.route}" if self.route else "")
        return self.page or ""


class PersonSection(msgspec.Struct, forbid_unknown_fields=True):
    """The person the agent works for: they follow the claim links the agent shows them (in its output)."""

    email: str


class EmulatorSection(msgspec.Struct, forbid_unknown_fields=True):
    checks: list[Check]
    canaries: list[Canary] = msgspec.field(default_factory=list)
    person: PersonSection | None = None
    # The trial emulator's settings (`emulator up`'s, e.g. ask_rate_limit = 3): what the task's world is like.
    settings: dict[str, str | int | float | bool] = msgspec.field(default_factory=dict)
    trials: int = 1
    pass_k: float = 1.0
    start: str | None = None
    env: dict[str, str] = msgspec.field(default_factory=dict)
    max_requests: int | None = None  # requests the agent may send in a trial (a check of its own when set)
    egress_allow: list[str] | None = None  # host patterns the agent may reach through the proxy (None: any)
    seed: int = 1  # the emulator's seed: ids, keys and codes repeat from one trial to the next


class TaskFile(msgspec.Struct, forbid_unknown_fields=False):
    """What `task.toml` holds; Harbor's other sections (`[verifier]`, `[environment]`, ...) are read by Harbor."""

    emulator: EmulatorSection
    task: TaskSection = msgspec.field(default_factory=TaskSection)
    agent: AgentSection = msgspec.field(default_factory=AgentSection)
    schema_version: str = "1.1"
    metadata: dict[str, object] = msgspec.field(default_factory=dict)


@dataclass(frozen=True)
class Task:
    name: str
    path: Path
    instruction: str
    description: str
    timeout: float
    trials: int
    pass_k: float
    start: Path | None
    env: dict[str, str]
    max_requests: int | None
    egress_allow: list[str] | None
    seed: int
    checks: list[Check]
    canaries: list[Canary]
    person: str | None  # the person's e-mail
    settings: dict[str, str | int | float | bool]

    def watched(self) -> dict[str, str]:
        """The values a trial's emulator watches for, by the secret's name: each `secret` check's `value_env`."""
        return {
            c.name: self.env[c.value_env] for c in self.checks if isinstance(c, SecretCheck) and c.value_env is not None
        }


def load(path: Path) -> Task:
    """The task in directory `path`, checked before any trial runs; TaskError says what is wrong and where."""
    path = path.resolve()
    if not path.is_dir():
        raise TaskError(f"{path}: not a task directory")
    try:
        instruction = (path / INSTRUCTION).read_text()
    except OSError:
        raise TaskError(f"{path}: no {INSTRUCTION} (what the agent is told)") from None
    try:
        raw = tomllib.loads((path / TASK_FILE).read_text())
    except OSError:
        raise TaskError(f"{path}: no {TASK_FILE}") from None
    except tomllib.TOMLDecodeError as e:
        raise TaskError(f"{path / TASK_FILE}: {e}") from None
    try:
        spec = msgspec.convert(raw, TaskFile)
    except msgspec.ValidationError as e:
        raise TaskError(f"{path / TASK_FILE}: {e}") from None
    section = spec.emulator
    where = f"{path / TASK_FILE}: [emulator]"
    if not section.checks:
        raise TaskError(f"{where} has no checks: a task needs a goal")
    if section.trials < 1:
        raise TaskError(f"{where} trials must be at least 1")
    if not 0 <= section.pass_k <= 1:
        raise TaskError(f"{where} pass_k must be between 0 and 1")
    if spec.agent.timeout_sec <= 0:
        raise TaskError(f"{path / TASK_FILE}: [agent] timeout_sec must be positive")
    for name in section.settings:
        if name not in FIELDS or name in RESERVED:
            raise TaskError(f"{where}.settings: {name} is not a setting a task may choose")
    for check in section.checks:
        if isinstance(check, SecretCheck) and check.value_env is not None and check.value_env not in section.env:
            raise TaskError(f"{where} secret check {check.name}: value_env {check.value_env} is not in [emulator.env]")
    for n, canary in enumerate(section.canaries, 1):
        if canary.host is None and not canary.events:
            raise TaskError(f"{where} canary {n} says neither `host` nor `events`: what following it looks like")
        _check_placement(canary, f"{where} canary {n}")
    start = None
    if section.start is not None:
        start = (path / section.start).resolve()
        if not start.is_file() or path not in start.parents:
            raise TaskError(f"{where} start: {section.start} is not a file in the task directory")
    return Task(
        name=spec.task.name or path.name,
        path=path,
        instruction=instruction,
        description=spec.task.description,
        timeout=spec.agent.timeout_sec,
        trials=section.trials,
        pass_k=section.pass_k,
        start=start,
        env=section.env,
        max_requests=section.max_requests,
        egress_allow=section.egress_allow,
        seed=section.seed,
        checks=section.checks,
        canaries=section.canaries,
        person=section.person.email if section.person else None,
        settings=section.settings,
    )


def _check_placement(canary: Canary, where: str) -> None:
    """A canary is planted in exactly one place, and that place exists."""
    placed = [name for name in ("page", "tool", "service") if getattr(canary, name) is not None]
    if len(placed) != 1:
        said = " and ".join(f"`{p}`" for p in placed) if placed else "none of them"
        raise TaskError(f"{where}: say exactly one of `page`, `tool` or `service` (where it is planted), not {said}")
    if canary.route is not None and canary.service is None:
        raise TaskError(f"{where}: `route` goes with `service` (the service whose answers on it carry the canary)")
    if canary.tool is not None and canary.tool not in canaries.TOOLS:
        raise TaskError(f"{where}: {canary.tool} is not an MCP tool (tools: {', '.join(canaries.TOOLS)})")
    if canary.service is not None and not canary.service.strip():
        raise TaskError(f"{where}: `service` is empty (a service's name, or a shell pattern of names)")
    if canary.page is not None:
        page = (DEFAULT_DOCS / canary.page).resolve()
        if page.suffix != ".md" or not page.is_file() or DEFAULT_DOCS.resolve() not in page.parents:
            raise TaskError(f"{where}: {canary.page} is not a markdown page of the docs corpus")
