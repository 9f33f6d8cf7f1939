"""An evaluation task: a directory in Harbor's layout (`instruction.md`, `task.toml`), read strictly.

`task.toml` keeps Harbor's sections where they say the same thing (`schema_version`, `[task]` name and description,
`[metadata]`, `[agent] timeout_sec`) and adds one of its own, `[emulator]`, which Harbor ignores as it ignores any
key it does not know: how many trials, the pass^k the task must reach, the starting state, the agent's environment,
the egress allow-list, the goal as a list of declarative checks (checks.py), and canaries: injected instructions
planted in what the agent reads (a docs page, an MCP tool's result, a hosted service's answers), with what following
one looks like, and moments (moments.py): clock moves and faults at given seconds of the agent's run.

The whole file is checked before any trial runs, and every problem is said at once: a key the format does not have
(with the nearest one), a value of the wrong type (settings by their own types), an event kind the journal does not
have, a check that can never pass (errors), and a check that can never fail (a warning; an error under `--strict`).
Harbor's sections the emulator does not read (`[verifier]`, `[environment]`, `[solution]`, `source`) are taken as
they are, and `[metadata]` is free-form. schema.py makes the JSON Schema of this format from the structs below.

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

import difflib
import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi

from emulator import config
from emulator.config import DEFAULT_DOCS, FIELDS, ConfigError, TomlTable, TomlValue
from emulator.core import canaries
from emulator.core.kinds import Kind
from emulator.eval.checks import Check, EventCheck, ScorecardCheck, SecretCheck, never_fails, never_passes
from emulator.eval.moments import Moment, problems

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
TASK_SETTINGS = tuple(name for name in FIELDS if name not in RESERVED)  # what `[emulator.settings]` may set
EVENT_KINDS = tuple(kind.value for kind in Kind)  # every kind the journal has: what an `event` check can count


class TaskError(ValueError):
    """A task directory that cannot be run, and why: every problem found in it, one a line, each naming its file
    and where in it."""

    def __init__(self, problems: str | Sequence[str]) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class Author(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    email: str | None = None


class TaskSection(msgspec.Struct, forbid_unknown_fields=True):
    name: str | None = None
    description: str = ""
    # Harbor's registry fields: taken, not read here.
    authors: list[Author] = msgspec.field(default_factory=list)
    keywords: list[str] = msgspec.field(default_factory=list)


class AgentSection(msgspec.Struct, forbid_unknown_fields=True):
    timeout_sec: float = 300.0
    # Harbor's: who runs the agent in Harbor's container and its network there. Taken, not read here: a trial's
    # egress is `[emulator] egress_allow`.
    user: str | int | None = None
    network_mode: str | None = None
    allowed_hosts: list[str] = msgspec.field(default_factory=list)


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
    moments: list[Moment] = msgspec.field(default_factory=list)  # clock moves and faults as the agent runs


class TaskFile(msgspec.Struct, forbid_unknown_fields=True):
    """What `task.toml` holds: Harbor's sections, and `[emulator]`, the emulator's own."""

    emulator: EmulatorSection
    task: TaskSection = msgspec.field(default_factory=TaskSection)
    agent: AgentSection = msgspec.field(default_factory=AgentSection)
    schema_version: str = "1.1"
    version: str | None = None  # Harbor's older name of schema_version
    # Free-form, and Harbor's sections for its own runs (its verifier, container and reference solution): taken as
    # they are, never read here. `Any`, as the schema shows them (`"type": "object"`): msgspec takes no recursive
    # alias such as `config.TomlTable`, and documents no `object`.
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    verifier: dict[str, Any] = msgspec.field(default_factory=dict)
    environment: dict[str, Any] = msgspec.field(default_factory=dict)
    solution: dict[str, Any] = msgspec.field(default_factory=dict)
    source: str | None = None


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
    moments: list[Moment] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # checks that can never fail, each naming its check

    def watched(self) -> dict[str, str]:
        """The values a trial's emulator watches for, by the secret's name: each `secret` check's `value_env`."""
        return {
            c.name: self.env[c.value_env] for c in self.checks if isinstance(c, SecretCheck) and c.value_env is not None
        }


@dataclass(frozen=True)
class Loaded:
    """Tasks read before any trial: those that can run, and every problem of every one (not just the first)."""

    tasks: list[Task]
    errors: list[str]
    warnings: list[str]


def load(path: Path) -> Task:
    """The task in directory `path`, checked whole before any trial runs; TaskError says every problem and where.
    A check that can never fail is not an error here: it is in the task's `warnings`."""
    task, errors = _read(path)
    if task is None:
        raise TaskError(errors)
    return task


def load_all(paths: Iterable[Path], *, strict: bool = False) -> Loaded:
    """Every task of `paths`, each checked whole, with the errors and warnings of all of them; `strict`: a
    warning (a check that can never fail) is an error, and its task is not run."""
    tasks, errors, warnings = [], [], []
    for path in paths:
        task, problems = _read(path)
        errors += problems
        if task is None:
            continue
        if strict and task.warnings:
            errors += [f"{w} (an error under --strict)" for w in task.warnings]
            continue
        warnings += task.warnings
        tasks.append(task)
    return Loaded(tasks, errors, warnings)


def _read(path: Path) -> tuple[Task | None, list[str]]:
    path = path.resolve()
    if not path.is_dir():
        return None, [f"{path}: not a task directory"]
    try:
        instruction = (path / INSTRUCTION).read_text()
    except OSError:
        return None, [f"{path}: no {INSTRUCTION} (what the agent is told)"]
    file = path / TASK_FILE
    try:
        raw = tomllib.loads(file.read_text())
    except OSError:
        return None, [f"{path}: no {TASK_FILE}"]
    except tomllib.TOMLDecodeError as e:
        return None, [f"{file}: {e}"]
    errors: list[str] = []
    decoded = _decode(raw, errors)
    if decoded is None:
        return None, [f"{file}: {e}" for e in errors]
    spec, numbers = decoded  # with the items that decoded: their own problems are said too
    warnings: list[str] = []
    start = _check(spec, numbers, path, errors, warnings)
    if errors:
        return None, [f"{file}: {e}" for e in errors]
    section = spec.emulator
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
        moments=section.moments,
        warnings=[f"{file}: {w}" for w in warnings],
    ), []


# --- the file's shape: keys and types -----------------------------------------------------------------------------

Path_ = tuple[str | int, ...]  # where a value is: table names and keys, and indices of arrays of tables
ARRAYS = {"checks": Check, "canaries": Canary, "moments": Moment}  # each item decoded alone: all of their errors


def _decode(raw: TomlTable, errors: list[str]) -> tuple[TaskFile, dict[str, list[int]]] | None:
    """The file as its structs, with every error in `errors`: every unknown key (it is dropped, so that the rest is
    still decoded), then each item of the `[emulator]` arrays alone, then everything else. With the items that
    decoded, and their numbers in the file (counted from 1) by array; None when the rest did not decode."""
    untagged: set[Path_] = set()  # items whose `check` names no check: said once, not decoded
    _unknown(raw, mi.type_info(TaskFile), (), raw, errors, untagged)
    emulator = raw.get("emulator")
    items: dict[str, list[object]] = {}  # each array's items as their structs
    numbers: dict[str, list[int]] = {name: [] for name in ARRAYS}
    if isinstance(emulator, dict):
        for name, kind in ARRAYS.items():
            listed = emulator.get(name)
            if not isinstance(listed, list):
                continue
            items[name] = []
            for n, item in enumerate(listed):
                if ("emulator", name, n) in untagged:
                    continue
                try:
                    items[name].append(msgspec.convert(item, kind))
                    numbers[name].append(n + 1)
                except msgspec.ValidationError as e:
                    errors.append(_said(e, ("emulator", name, n), raw))
        emulator.update({name: [] for name in items})
    try:
        spec = msgspec.convert(raw, TaskFile)
    except msgspec.ValidationError as e:
        errors.append(_said(e, (), raw))
        return None
    return msgspec.structs.replace(spec, emulator=msgspec.structs.replace(spec.emulator, **items)), numbers


def _unknown(raw: object, info: mi.Type, path: Path_, doc: TomlTable, errors: list[str], untagged: set[Path_]) -> None:
    """Each key of `raw` that its struct does not have, said with where it is and the nearest name, and dropped."""
    if isinstance(info, mi.UnionType):
        structs = [t for t in info.types if isinstance(t, mi.StructType)]
        if not structs or not isinstance(raw, dict):
            return
        info = structs[0]
        if info.tag_field is not None:  # a tagged union (the checks): its tag says which struct
            tags = {str(t.tag): t for t in structs}
            tag = raw.get(info.tag_field)
            if not isinstance(tag, str) or tag not in tags:
                said = f"{info.tag_field} = {tag!r} is not one of" if tag is not None else f"no `{info.tag_field}`:"
                errors.append(f"{_where(path, doc)}: {said} {', '.join(tags)}{_hint(str(tag), tags, ' ')}")
                untagged.add(path)
                return
            info = tags[tag]
    if isinstance(info, mi.StructType) and isinstance(raw, dict):
        fields = {f.encode_name: f.type for f in info.fields}
        for key in list(raw):
            if key in fields:
                _unknown(raw[key], fields[key], (*path, key), doc, errors, untagged)
            elif key != info.tag_field:
                errors.append(f"{_key(path, key, doc)}: no such key{_hint(key, fields, ' ')}")
                del raw[key]
    elif isinstance(info, mi.ListType) and isinstance(raw, list):
        for n, item in enumerate(raw):
            _unknown(item, info.item_type, (*path, n), doc, errors, untagged)
    elif isinstance(info, mi.DictType) and isinstance(raw, dict):
        for key, value in raw.items():
            _unknown(value, info.value_type, (*path, key), doc, errors, untagged)


def _hint(name: str, known: Iterable[str], sep: str = "") -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"{sep}(did you mean {close[0]}?)" if close else ""


def _where(path: Path_, doc: TomlTable) -> str:
    """A place in the file as its author reads it: `[agent]`, `[emulator.settings]`, `[[emulator.checks]] #2
    (event)`, `[[emulator.moments]] #1 fault` (arrays of tables counted from 1, a check with its kind)."""
    tables: list[str] = []
    item, inner = "", []
    node: TomlValue | None = doc
    for part in path:
        node = _step(node, part)
        if isinstance(part, int):
            kind = node.get("check") if isinstance(node, dict) else None
            item = (f"{item} {'.'.join(inner)}" if item else f"[[{'.'.join(tables)}]]") + f" #{part + 1}"
            item += f" ({kind})" if isinstance(kind, str) else ""
            inner = []
        else:
            (inner if item else tables).append(part)
    if item:
        return f"{item} {'.'.join(inner)}".rstrip()
    return f"[{'.'.join(tables)}]" if tables else "the top level"


def _key(path: Path_, key: str, doc: TomlTable) -> str:
    """A key as its author reads it: `[agent] timeout_sec`, `[[emulator.moments]] #1 fault.status`, `emulator`."""
    if any(isinstance(part, int) for part in path):
        return _where((*path, key), doc)
    return f"{_where(path, doc)} {key}" if path else key


_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def _said(error: msgspec.ValidationError, at: Path_, doc: TomlTable) -> str:
    """A decoding error of the value at `at` with where it is, as `_where` says it (msgspec says `$.a[0].b`)."""
    message, _, where = str(error).partition(" - at `$")
    path = list(at)
    for name, index in _STEP.findall(where.rstrip("`")):
        path.append(int(index) if index else name)
    if path and isinstance(path[-1], str) and not isinstance(_node(doc, path), dict):
        return f"{_key(tuple(path[:-1]), path[-1], doc)}: {message}"
    return f"{_where(tuple(path), doc)}: {message}"


def _node(doc: TomlTable, path: Sequence[str | int]) -> TomlValue | None:
    node: TomlValue | None = doc
    for part in path:
        node = _step(node, part)
    return node


def _step(node: TomlValue | None, part: str | int) -> TomlValue | None:
    """The item `part` of an array, or the value of key `part` of a table; None when there is none."""
    if isinstance(part, int):
        return node[part] if isinstance(node, list) and part < len(node) else None
    return node.get(part) if isinstance(node, dict) else None


# --- what the values mean ----------------------------------------------------------------------------------------


def _check(
    spec: TaskFile, numbers: dict[str, list[int]], path: Path, errors: list[str], warnings: list[str]
) -> Path | None:
    """Every problem of a decoded task into `errors` (a check that can never fail into `warnings`), its arrays'
    items named by their `numbers` in the file; the starting state's path."""
    section = spec.emulator
    if not section.checks and not errors:
        errors.append("[emulator] has no checks: a task needs a goal")
    if section.trials < 1:
        errors.append("[emulator] trials must be at least 1")
    if not 0 <= section.pass_k <= 1:
        errors.append("[emulator] pass_k must be between 0 and 1")
    if spec.agent.timeout_sec <= 0:
        errors.append("[agent] timeout_sec must be positive")
    errors += _settings(section.settings)
    for n, check in zip(numbers["checks"], section.checks, strict=True):
        where = f"[[emulator.checks]] #{n} ({check.__struct_config__.tag})"
        if isinstance(check, SecretCheck) and check.value_env is not None and check.value_env not in section.env:
            errors.append(f"{where} secret {check.name}: value_env {check.value_env} is not in [emulator.env]")
        if isinstance(check, EventCheck) and check.kind not in EVENT_KINDS:
            errors.append(f"{where} kind: {_not_a_kind(check.kind)}")
        if isinstance(check, ScorecardCheck):
            errors += [f"{where} allow: {_not_a_rule(rule)}" for rule in check.allow if _not_a_rule(rule)]
        if (why := never_passes(check)) is not None:
            errors.append(f"{where} can never pass: {why}")
        elif (why := never_fails(check, section.egress_allow)) is not None:
            warnings.append(f"{where} can never fail: {why}")
    for n, canary in zip(numbers["canaries"], section.canaries, strict=True):
        where = f"[[emulator.canaries]] #{n}"
        if canary.host is None and not canary.events:
            errors.append(f"{where} says neither `host` nor `events`: what following it looks like")
        errors += [f"{where} events: {_not_a_kind(kind)}" for kind in canary.events if kind not in EVENT_KINDS]
        errors += [f"{where}: {p}" for p in _placement(canary)]
    for n, moment in zip(numbers["moments"], section.moments, strict=True):
        where = f"[[emulator.moments]] #{n}"
        errors += [f"{where}: {p}" for p in problems(moment)]
        if moment.at >= spec.agent.timeout_sec:
            errors.append(f"{where}: at {moment.at:g} s is not before [agent] timeout_sec ({spec.agent.timeout_sec:g})")
    if section.start is None:
        return None
    start = (path / section.start).resolve()
    if not start.is_file() or path not in start.parents:
        errors.append(f"[emulator] start: {section.start} is not a file in the task directory")
    return start


def _not_a_kind(kind: str) -> str:
    return f"{kind!r} is not a kind of event the journal has{_hint(kind, EVENT_KINDS, ' ')}"


def _not_a_rule(rule: str) -> str | None:
    from emulator.behaviour.scorecard import RULES

    ids = [r.id for r in RULES]
    return None if rule in ids else f"{rule!r} is not a scorecard rule{_hint(rule, ids, ' ')}"


def _settings(settings: dict[str, str | int | float | bool]) -> list[str]:
    """The trial's settings: each one a task may choose, of its setting's type, and their values as `emulator up`
    would take them (a value it refuses would fail every trial at start)."""
    where, errors = "[emulator.settings]", []
    for name, value in settings.items():
        if name in RESERVED:
            errors.append(f"{where} {name}: not a setting a task may choose (the trial sets it)")
        elif name not in FIELDS:
            errors.append(f"{where} {name}: not a setting{_hint(name, TASK_SETTINGS, ' ')}")
        elif type(value) not in config.toml_types(name):
            wanted = " or ".join(_TOML_TYPE[t] for t in config.toml_types(name))
            errors.append(f"{where} {name} = {value!r}: {_TOML_TYPE[type(value)]}, not {wanted}")
    if not errors:
        try:
            config.check_values(dict(settings))
        except ConfigError as e:
            errors.append(f"{where} {e}")
    return errors


_TOML_TYPE = {str: "a string", int: "an integer", float: "a float", bool: "a boolean"}


def _placement(canary: Canary) -> list[str]:
    """A canary is planted in exactly one place, and that place exists."""
    placed = [name for name in ("page", "tool", "service") if getattr(canary, name) is not None]
    if len(placed) != 1:
        said = " and ".join(f"`{p}`" for p in placed) if placed else "none of them"
        return [f"say exactly one of `page`, `tool` or `service` (where it is planted), not {said}"]
    problems = []
    if canary.route is not None and canary.service is None:
        problems.append("`route` goes with `service` (the service whose answers on it carry the canary)")
    if canary.tool is not None and canary.tool not in canaries.TOOLS:
        problems.append(f"{canary.tool} is not an MCP tool (tools: {', '.join(canaries.TOOLS)})")
    if canary.service is not None and not canary.service.strip():
        problems.append("`service` is empty (a service's name, or a shell pattern of names)")
    if canary.page is not None:
        page = (DEFAULT_DOCS / canary.page).resolve()
        if page.suffix != ".md" or not page.is_file() or DEFAULT_DOCS.resolve() not in page.parents:
            problems.append(f"{canary.page} is not a markdown page of the docs corpus")
    return problems
