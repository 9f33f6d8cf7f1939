"""The reference pages, generated from the code at every build (mkdocs-gen-files runs this script): never written twice.

Each page reads its one home in the code: the commands and flags from the argparse parser, the settings from
`emulator/config.py`, `task.toml` from the structs `emulator eval` decodes it with (and its JSON Schema), the journal's
kinds and their fields from `core/kinds.py` and `core/payloads.py`, the error codes from `core/errors.py`, the
scorecard's rules, the dashboard's keys, each origin's OpenAPI document (from an emulator started for the build) and
the test kit's API from its docstrings (mkdocstrings). A change to any of them changes the page at the next build.

    python docs/gen_reference.py --out DIR    # the same pages, written to DIR
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import sys
import tempfile
import textwrap
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import msgspec

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from emulator import cli, config  # noqa: E402
from emulator.core import errors, kinds, payloads  # noqa: E402

Page = Callable[[IO[str]], None]


def cell(text: object) -> str:
    """Text fit for a Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def code(text: object) -> str:
    """An inline code span that holds any text, backticks included."""
    s = str(text)
    fence = "``" if "`" in s else "`"
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}".replace("|", "\\|")


def generated(out: IO[str], source: str) -> None:
    out.write(f'!!! info "Generated from {source} at every build of this site"\n\n')


# --- commands -------------------------------------------------------------------------------------------------


def _subparsers(p: argparse.ArgumentParser) -> argparse._SubParsersAction[argparse.ArgumentParser] | None:
    return next((a for a in p._actions if isinstance(a, argparse._SubParsersAction)), None)


def _commands(
    p: argparse.ArgumentParser, path: list[str], helps: dict[str, str]
) -> Iterator[tuple[list[str], argparse.ArgumentParser, str]]:
    sub = _subparsers(p)
    if sub is None:
        return
    summaries = {a.dest: a.help or "" for a in sub._choices_actions}
    seen: set[int] = set()
    for name, child in sub.choices.items():
        if id(child) in seen:  # an alias
            continue
        seen.add(id(child))
        yield [*path, name], child, summaries.get(name, "")
        yield from _commands(child, [*path, name], helps)


def _default(action: argparse.Action) -> str:
    d = action.default
    if d is None or d is argparse.SUPPRESS or d is False or d == [] or isinstance(action, argparse._HelpAction):
        return ""
    return code(d)


def _flag(action: argparse.Action) -> str:
    if action.option_strings:
        names = ", ".join(code(o) for o in action.option_strings)
        takes = action.nargs != 0 and not isinstance(
            action, (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse.BooleanOptionalAction)
        )
        metavar = action.metavar or (action.dest.upper() if takes else None)
        return names + (f" {code(metavar)}" if takes and metavar else "")
    return code(action.metavar or action.dest)


def page_cli(out: IO[str]) -> None:
    root = cli.parser()
    out.write("# Commands\n\n")
    generated(out, "the `emulator` command's argparse parser (`emulator/cli.py`, `emulator/commands/`)")
    out.write("```text\n" + root.format_help().strip() + "\n```\n\n")
    found = list(_commands(root, ["emulator"], {}))
    out.write("| Command | What it does |\n|---|---|\n")
    for path, _, summary in found:
        anchor = "-".join(path)
        out.write(f"| [{code(' '.join(path))}](#{anchor}) | {cell(summary)} |\n")
    out.write("\n")
    for path, p, summary in found:
        name = " ".join(path)
        level = "#" * min(len(path) + 1, 4)
        out.write(f"{level} `{name}` {{ #{'-'.join(path)} }}\n\n")
        if summary:
            out.write(f"{summary}\n\n")
        usage = p.format_usage().removeprefix("usage: ").strip()
        out.write(f"```text\n{usage}\n```\n\n")
        if p.description and p.description != summary:
            out.write(textwrap.dedent(p.description).strip() + "\n\n")
        actions = [a for a in p._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]
        if actions:
            out.write("| Argument | Default | Meaning |\n|---|---|---|\n")
            for a in actions:
                if a.help == argparse.SUPPRESS:
                    continue
                out.write(f"| {_flag(a)} | {_default(a)} | {cell(a.help or '')} |\n")
            out.write("\n")
        if p.epilog:
            out.write("```text\n" + textwrap.dedent(p.epilog).strip() + "\n```\n\n")


# --- settings -------------------------------------------------------------------------------------------------


def _up_flags() -> dict[str, list[str]]:
    sub = _subparsers(cli.parser())
    assert sub is not None
    up = sub.choices["up"]
    flags: dict[str, list[str]] = {}
    for a in up._actions:
        if a.dest in config.FIELDS and a.option_strings:
            flags.setdefault(a.dest, []).extend(a.option_strings)
    return flags


def _setting_default(name: str) -> str:
    field = next(f for f in msgspec.structs.fields(config.Settings) if f.name == name)
    if field.default is not msgspec.NODEFAULT:
        value = field.default
    elif field.default_factory is not msgspec.NODEFAULT:
        value = field.default_factory()
    else:
        return ""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return code(str(value).lower())
    if isinstance(value, Path):
        home = Path.home()
        text = str(value)
        if text.startswith(str(ROOT)):
            return "the shipped " + code(Path(text).name)
        return code(text.replace(str(home), "~", 1))
    return code(value)


def page_settings(out: IO[str]) -> None:
    out.write("# Settings\n\n")
    generated(out, "`emulator/config.py` (the `Settings` type, its help and choices) and `emulator up`'s parser")
    out.write(
        "Every setting has one name, usable three ways: a flag of `emulator up` (an on/off setting also has its "
        "`--no-` form), an `EMULATOR_<NAME>` environment variable, or a key in `<state-dir>/emulator.toml` (or the "
        "file `--config FILE` names). A flag wins over the environment, which wins over the file. An unknown key, "
        "flag or `EMULATOR_*` variable is refused with the nearest name, and a bad value stops the start with a "
        "message naming the setting and where its value came from.\n\n"
    )
    flags = _up_flags()
    out.write("| Setting (file key) | Flag | Environment variable | Default | Meaning |\n|---|---|---|---|---|\n")
    for name in config.FIELDS:
        shown = flags.get(name, [config.flag_of(name)])
        if name in config.BOOLS and not any(f.startswith("--no-") for f in shown):
            shown = [*shown, "--no-" + config.flag_of(name)[2:]]
        meaning = config.HELP[name]
        if name in config.CHOICES:
            meaning += " — one of " + ", ".join(code(c) for c in config.CHOICES[name])
        out.write(
            f"| `{name}` | {', '.join(code(f) for f in shown)} | `{config.env_of(name)}` | {_setting_default(name)} "
            f"| {cell(meaning)} |\n"
        )
    out.write(
        "\n## Variables that are not settings\n\nThe emulator's own tools read these `EMULATOR_*` variables; any "
        "other that names no setting is refused at start.\n\n| Variable | Read by |\n|---|---|\n"
    )
    for var, who in config.NOT_SETTINGS.items():
        out.write(f"| `{var}` | {cell(who)} |\n")


# --- task.toml ------------------------------------------------------------------------------------------------


def _comments(cls: type) -> dict[str, str]:
    """Each field's comment in the class's source: on its line (`x: int = 1  # ...`) or the lines just above it."""
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    found: dict[str, str] = {}
    above: list[str] = []
    for line in lines[1:]:
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("# ").strip())
            continue
        m = re.match(r"\s+([a-z_][a-z_0-9]*)\s*:[^#]*(?:#\s*(.*))?$", line)
        if m:
            text = " ".join([*above, m.group(2) or ""]).strip()
            if text:
                found[m.group(1)] = text
        above = []
    return found


def _type_name(t: object, table: str = "table") -> str:
    """A field's type in words; `table` names a dict (TOML's word, or JSON's `object`)."""
    if t is type(None):
        return "none"
    origin = typing.get_origin(t)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a, table) for a in typing.get_args(t) if a is not msgspec.UnsetType)
    if origin in (list, tuple):
        return f"array of {_type_name(typing.get_args(t)[0], table)}"
    if origin is dict:
        return table
    if t is typing.Any:
        return "any"
    name = getattr(t, "__name__", str(t))
    return {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}.get(name, name)


def _fields_table(out: IO[str], cls: type[msgspec.Struct], *, published: bool = False) -> None:
    """A struct's fields: a file's keys with their defaults, or (`published`) an event's, with whether each is always
    there."""
    hints = typing.get_type_hints(cls, include_extras=False)
    notes = _comments(cls)
    if published:
        out.write("| Field | Type | Always there | Meaning |\n|---|---|---|---|\n")
    else:
        out.write("| Key | Type | Default | Meaning |\n|---|---|---|---|\n")
    for f in msgspec.structs.fields(cls):
        if published:
            default = "yes" if f.required else ""
        elif f.default is not msgspec.NODEFAULT:
            default = "none" if f.default is None else code(json.dumps(msgspec.to_builtins(f.default)))
        elif f.default_factory is not msgspec.NODEFAULT:
            default = code(json.dumps(msgspec.to_builtins(f.default_factory())))
        else:
            default = "required"
        kind = _type_name(hints[f.name], "object" if published else "table")
        out.write(f"| `{f.encode_name}` | {cell(kind)} | {default} | {cell(notes.get(f.name, ''))} |\n")
    out.write("\n")


def _doc(cls: type) -> str:
    return inspect.cleandoc(cls.__doc__) + "\n\n" if cls.__doc__ and cls.__module__ != "msgspec" else ""


def page_task_format(out: IO[str]) -> None:
    from emulator.behaviour.scorecard import RULES
    from emulator.core.faults import FaultSpec
    from emulator.eval import checks, schema, tasks
    from emulator.eval.moments import Moment

    out.write("# Evaluation tasks (`task.toml`)\n\n")
    generated(out, "the structs `emulator eval` decodes `task.toml` with (`emulator/eval/tasks.py`, `checks.py`)")
    out.write(
        "A task is a folder with `instruction.md` (what the agent is asked) and `task.toml`, in Harbor's layout: "
        "Harbor's sections (`[task]`, `[agent]`, `[metadata]`, `[verifier]`, `[environment]`, `[solution]`) are "
        "taken as they are, and `[emulator]` is the emulator's own. `emulator eval --schema` prints the JSON Schema "
        "below; put `#:schema` with its path on the file's first line for an editor's completion and checks. Every "
        "error in a file is reported at once, with where it is and the nearest right name.\n\n"
    )
    sections: list[tuple[str, type[msgspec.Struct]]] = [
        ("The file", tasks.TaskFile),
        ("`[task]`", tasks.TaskSection),
        ("`[agent]`", tasks.AgentSection),
        ("`[emulator]`", tasks.EmulatorSection),
        ("`[emulator.person]`", tasks.PersonSection),
        ("`[[emulator.canaries]]`", tasks.Canary),
        ("`[[emulator.moments]]`", Moment),
        ("A moment's `fault`", FaultSpec),
    ]
    for title, cls in sections:
        out.write(f"## {title}\n\n{_doc(cls)}")
        _fields_table(out, cls)
    out.write(
        "## `[[emulator.checks]]`\n\nEach check names its kind in `check`; a trial passes when every check holds. "
        "The kinds:\n\n"
    )
    kinds_of: list[type[msgspec.Struct]] = list(typing.get_args(checks.Check))
    out.write("| `check` | What it holds |\n|---|---|\n")
    for cls in kinds_of:
        tag = cls.__struct_config__.tag
        out.write(f"| [`{tag}`](#check-{tag}) | {cell(_doc(cls))} |\n")
    out.write("\n")
    for cls in kinds_of:
        tag = cls.__struct_config__.tag
        out.write(f"### `{tag}` {{ #check-{tag} }}\n\n{_doc(cls)}")
        _fields_table(out, cls)
    out.write(
        "## `[emulator.settings]`\n\nThe trial emulator's settings a task may choose (see [Settings](settings.md)); "
        "those each trial decides itself (its ports, state dir, seed, clock) are not among them:\n\n"
        + ", ".join(code(s) for s in tasks.TASK_SETTINGS)
        + "\n\n## Names a task may use\n\n"
        "- An `event` check's `kind`, a canary's `events`: the journal's kinds ([Journal events](events.md)).\n"
        "- A `scorecard_clean` check's `allow`: "
        + ", ".join(code(r.id) for r in RULES)
        + " ([Scorecard rules](scorecard.md)).\n\n"
        "## JSON Schema\n\n"
        '??? note "task.schema.json (as `emulator eval --schema` prints it)"\n\n'
        + textwrap.indent("```json\n" + schema.text() + "```", "    ")
        + "\n"
    )


# --- events ---------------------------------------------------------------------------------------------------


def _source_groups(
    module: types.ModuleType, match: Callable[[str], str | None]
) -> list[tuple[str, list[tuple[str, str]]]]:
    """A module's definitions in source order, grouped by the comment line that precedes each group; each with the
    comment on its own line (or the lines above it)."""
    groups: list[tuple[str, list[tuple[str, str]]]] = []
    pending: list[str] = []
    for line in inspect.getsource(module).splitlines():
        stripped = line.strip()
        if stripped.startswith("#") and not stripped.startswith("# ---"):
            pending.append(stripped.lstrip("# ").strip())
            continue
        name = match(line)
        if name is None:
            pending = [] if not stripped else pending
            continue
        note = line.split("#", 1)[1].strip() if "#" in line.split("=", 1)[-1] else ""
        if pending or not groups:
            groups.append((" ".join(pending), []))
            pending = []
        groups[-1][1].append((name, note))
    return groups


def page_events(out: IO[str]) -> None:
    out.write("# Journal events\n\n")
    generated(out, "`emulator/core/kinds.py` (every kind) and `emulator/core/payloads.py` (what each says)")
    out.write(
        inspect.cleandoc(payloads.__doc__ or "")
        + "\n\nEvery event has `seq`, `at` (the emulator's clock), `kind`, `subject` and `data`; `data` is the kind's "
        "payload below. `emulator events --kinds K1,K2` filters by kind (a prefix such as `trial` takes every "
        "`trial.*`), and an evaluation task's `event` check counts them.\n\n"
    )
    by_kind = {cls.KIND: cls for cls in _subclasses(payloads.Payload) if "KIND" in cls.__dict__}
    member = re.compile(r"\s+([A-Z][A-Z_0-9]*)\s*=\s*\"([a-z_.]+)\"")

    def match(line: str) -> str | None:
        m = member.match(line)
        return m.group(2) if m else None

    for heading, group in _source_groups(kinds, match):
        out.write(f"## {heading[:1].upper() + heading[1:] or 'Other'}\n\n")
        for value, note in group:
            cls = by_kind.get(kinds.Kind(value))
            out.write(f"### `{value}`\n\n")
            if note:
                out.write(note[:1].upper() + note[1:] + ".\n\n")
            if cls is None:
                out.write("No payload type.\n\n")
                continue
            if cls.__doc__:
                out.write(_doc(cls))
            out.write(f"Payload: `{cls.__name__}`.\n\n")
            _fields_table(out, cls, published=True)


def _subclasses(cls: type) -> Iterator[type[Any]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


# --- errors ---------------------------------------------------------------------------------------------------


def page_errors(out: IO[str]) -> None:
    out.write("# Error codes\n\n")
    generated(out, "the catalogue of refusals, `emulator/core/errors.py`")
    out.write(inspect.cleandoc(errors.__doc__ or "") + "\n\n")
    failure = re.compile(r"([A-Z][A-Z_0-9]*)\s*=\s*Failure\(")

    def match(line: str) -> str | None:
        m = failure.match(line)
        return m.group(1) if m else None

    for heading, group in _source_groups(errors, match):
        out.write(f"## {heading or 'Every origin: the codes of the statuses'}\n\n")
        out.write("| Code | Status | Name in the code | Note |\n|---|---|---|---|\n")
        for name, note in group:
            f = getattr(errors, name)
            out.write(f"| `{f.code}` | {f.status} | `{name}` | {cell(note)} |\n")
        out.write("\n")


# --- scorecard, dashboard -------------------------------------------------------------------------------------


def page_scorecard(out: IO[str]) -> None:
    from emulator.behaviour import scorecard

    out.write("# Scorecard rules\n\n")
    generated(out, "`emulator/behaviour/scorecard.py` (`RULES`)")
    out.write(
        "`emulator report` (and `GET /_emulator/report`) judges each agent by these rules, attributing every call by "
        "the credential it carried. An evaluation task's `scorecard_clean` check may `allow` some of them.\n\n"
        "| Rule | Fires when an agent |\n|---|---|\n"
    )
    for rule in scorecard.RULES:
        out.write(f"| `{rule.id}` | {cell(rule.why)} |\n")


def page_dashboard_keys(out: IO[str]) -> None:
    from tui.keys import KEYS, VIEWS

    out.write("# Dashboard keys\n\n")
    generated(out, "`tui/keys.py` (`KEYS`, `VIEWS`)")
    out.write("`emulator tui` shows these views:\n\n| Key | View |\n|---|---|\n")
    for view in VIEWS:
        out.write(f"| `{view.key}` | {cell(view.title)} |\n")
    out.write(
        "\nand takes these keys. An act changes the emulator (`--readonly` hides it); each has the command that does "
        "the same from a shell.\n\n| Key | Does | Group | Act | Command |\n|---|---|---|---|---|\n"
    )
    for key in KEYS:
        out.write(
            f"| {code(key.label)} | {cell(key.help)} | {cell(key.group)} | {'yes' if key.act else ''} "
            f"| {code(key.cli) if key.cli else ''} |\n"
        )


# --- OpenAPI --------------------------------------------------------------------------------------------------

ORIGINS = (
    ("site", "The site", "the agent API, discovery, trials, pages and the operator API (`/_emulator`)"),
    ("auth", "The identity provider", "agent registration, claims, tokens, the sign-in pages, the agents API"),
    ("api", "The control plane", "the management API the `pxt` client speaks, blobs"),
)


def openapi_documents() -> dict[str, dict[str, Any]]:
    """Each origin's document, from an emulator started for the build (on free ports, in a temporary state dir)."""
    import httpx

    from emulator.core.openapi import DOCUMENT_PATH
    from emulator.testkit import Testkit

    with tempfile.TemporaryDirectory() as state, Testkit.start(Path(state), ["--runtime", "process"]) as emu:
        bases = {"site": emu.url, "auth": emu.auth_url, "api": emu.api_url}
        return {name: httpx.get(bases[name] + DOCUMENT_PATH, timeout=60).json() for name, _, _ in ORIGINS}


def _ref_name(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "oneOf" in schema or "anyOf" in schema:
        return " or ".join(_ref_name(s) for s in schema.get("oneOf", schema.get("anyOf", [])))
    if schema.get("type") == "array":
        return f"array of {_ref_name(schema.get('items', {}))}"
    return str(schema.get("type", "any"))


def page_openapi(out: IO[str], documents: dict[str, dict[str, Any]]) -> None:
    out.write("# OpenAPI documents\n\n")
    generated(out, "each origin's routes (Litestar), as a running emulator serves them at `/schema/openapi.json`")
    out.write(
        "Each origin serves its OpenAPI 3.1 document at `/schema/openapi.json`; a client generated from it (the "
        "suite generates one with openapi-python-client) gets the typed answers and errors declared here. The "
        "documents as of this build:\n\n"
    )
    for name, title, what in ORIGINS:
        out.write(f"- [{title}](openapi/{name}.json) ({what})\n")
    out.write("\n")
    for name, title, _ in ORIGINS:
        doc = documents[name]
        out.write(f"## {title}\n\n{cell(doc.get('info', {}).get('description', ''))}\n\n")
        out.write("| Method and path | Summary | Request body | Answers |\n|---|---|---|---|\n")
        for path, item in sorted(doc.get("paths", {}).items()):
            for method, op in item.items():
                if method not in {"get", "post", "put", "patch", "delete", "head"}:
                    continue
                body = op.get("requestBody", {}).get("content", {})
                bodies = ", ".join(f"{code(mt)} {_ref_name(c.get('schema', {}))}" for mt, c in body.items())
                answers = ", ".join(sorted(op.get("responses", {})))
                summary = (op.get("description") or "").split("\n")[0] or op.get("summary", "")
                out.write(f"| {code(method.upper() + ' ' + path)} | {cell(summary)} | {cell(bodies)} | {answers} |\n")
        out.write("\n")


# --- the test kit ---------------------------------------------------------------------------------------------


def page_testkit(out: IO[str]) -> None:
    out.write("# The test kit (Python)\n\n")
    generated(out, "the docstrings of `emulator/testkit.py` and `emulator/pytest_plugin.py`")
    out.write(
        "`pip install` of the emulator brings a pytest plugin: its `emulator` fixture is a `Testkit` (an emulator "
        "started on free ports for the session, reset between tests). Scripts use `Testkit` directly.\n\n"
        "::: emulator.pytest_plugin\n    options:\n      show_root_heading: true\n"
        "      members: [emulator, emulator_env]\n\n"
        "::: emulator.testkit\n    options:\n      show_root_heading: true\n      filters: ['!^_']\n"
        "      members: [Testkit, Clock, Acts, Faults, Snapshots, EmulatorError]\n"
        "      show_if_no_docstring: true\n      inherited_members: false\n\n"
    )


# --- benchmark figures ----------------------------------------------------------------------------------------

_NOT_FIGURES = {"machine", "settings", "runs", "runs_s", "date", "task", "agent", "client", "runtime"}


def _figures(prefix: str, value: object, rows: list[tuple[str, str]], depth: int = 0) -> None:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int | float):
        rows.append((prefix, f"{value:g}"))
    elif isinstance(value, dict) and depth < 3:
        for key, inner in value.items():
            if key not in _NOT_FIGURES and not key.endswith("_runs") and not key.startswith("runs"):
                _figures(f"{prefix}.{key}" if prefix else str(key), inner, rows, depth + 1)


# The results files not named after their benchmark.
_PRODUCERS = {
    "results.json": "benchmarks/load.py",
    "hosted-init-first-results.json": "benchmarks/hosted.py --init-first",
}


def _producer(name: str) -> str:
    return f"benchmarks/{name.removesuffix('-results.json').replace('-', '_')}.py"


# The headline figures: what each asks, its results file and the figure's key there (dots go down into tables).
HEADLINES = (
    ("`GET /health` throughput, emulator / bare app", "results.json", "ratios.health_ratio", "×"),
    ("`GET /ask` / bare app's `/health`", "results.json", "ratios.ask_get_ratio", "×"),
    ("`POST /ask` / bare app's `/health`", "results.json", "ratios.ask_post_ratio", "×"),
    ("token exchanges per second (ES256)", "results.json", "absolute.emu_token_rps", " req/s"),
    ("start to a healthy `/health`, emulator / bare app", "results.json", "ratios.startup_ratio", "×"),
    ("idle memory (RSS), emulator / bare app", "results.json", "ratios.rss_ratio", "×"),
    ("hosted workflow, empty build cache / local", "hosted-init-first-results.json", "ratios.cold_ratio", "×"),
    (
        "hosted workflow, new state dir on a warm build cache / local",
        "hosted-init-first-results.json",
        "ratios.fresh_warm_cache_ratio",
        "×",
    ),
    ("hosted workflow, warm / local", "hosted-init-first-results.json", "ratios.warm_ratio", "×"),
    ("ten `emulator exec` runs / ten local runs", "throwaway-results.json", "ratio", "×"),
    (
        "idle throwaway emulator / developer profile (RSS)",
        "memory-results.json",
        "ratios.throwaway_to_developer_rss",
        "×",
    ),
    (
        "`service restart` to the first 200, from the spare / cold",
        "services-results.json",
        "ratios.restart_vs_cold",
        "×",
    ),
    ("reset with a hosted database / a restart", "testkit-results.json", "ratios.reset_hosted", "×"),
    ("snapshot load with a hosted database / a restart", "testkit-results.json", "ratios.load_hosted", "×"),
    (
        "`emulator eval` (namespace sandbox) / `emulator exec`, per trial",
        "evaluation-results.json",
        "ratio_to_exec.eval_namespace",
        "×",
    ),
    ("container start / pip-installed start", "container-results.json", "ratios.start_ratio", "×"),
)


def _at(data: object, dotted: str) -> object:
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            raise KeyError(f"no {dotted} in a benchmark's results")
        data = data[part]
    return data


def page_benchmark_figures(out: IO[str]) -> None:
    out.write("# Benchmark figures\n\n")
    generated(out, "`benchmarks/*-results.json`, as the last run of each benchmark wrote them")
    out.write(
        "Each benchmark writes its results file; these are their figures (ratios to a reference measured in the same "
        "run, medians in seconds, sizes), without the single runs. How they are measured: "
        "[How the benchmarks measure](../explanation/benchmarks.md).\n\n## Headline figures\n\n"
        "| Figure | Value | From |\n|---|---|---|\n"
    )
    for label, name, key, unit in HEADLINES:
        data = json.loads((ROOT / "benchmarks" / name).read_text())
        value = _at(data, key)
        out.write(f"| {label} | {value:g}{unit} | `{name}` ({str(data.get('date', ''))[:10]}) |\n")
    out.write("\n")
    for path in sorted((ROOT / "benchmarks").glob("*results.json")):
        data = json.loads(path.read_text())
        rows: list[tuple[str, str]] = []
        _figures("", data, rows)
        when = data.get("date", "") if isinstance(data, dict) else ""
        out.write(f"## `{path.name}`\n\nMeasured {when}")
        machine = data.get("machine") if isinstance(data, dict) else None
        if isinstance(machine, dict) and "nproc" in machine:
            out.write(f" on {machine['nproc']} cores")
        out.write(f" by `{_PRODUCERS.get(path.name) or _producer(path.name)}`.\n\n")
        out.write("| Figure | Value |\n|---|---|\n")
        for key, value in rows:
            out.write(f"| `{key}` | {value} |\n")
        out.write("\n")


# --- writing --------------------------------------------------------------------------------------------------

PAGES: dict[str, Page] = {
    "cli": page_cli,
    "settings": page_settings,
    "task-format": page_task_format,
    "events": page_events,
    "errors": page_errors,
    "scorecard": page_scorecard,
    "dashboard-keys": page_dashboard_keys,
    "testkit": page_testkit,
    "benchmarks": page_benchmark_figures,
}


def write(open_: Callable[[str], IO[str]]) -> None:
    for name, page in PAGES.items():
        with open_(f"reference/{name}.md") as out:
            page(out)
    documents = openapi_documents()
    with open_("reference/openapi.md") as out:
        page_openapi(out, documents)
    for name, doc in documents.items():
        with open_(f"reference/openapi/{name}.json") as out:
            json.dump(doc, out, indent=2)


if __name__ == "__main__" and sys.argv[1:2] == ["--out"]:  # the pages written to a directory
    base = Path(sys.argv[2])

    def to_dir(path: str) -> IO[str]:
        (base / path).parent.mkdir(parents=True, exist_ok=True)
        return (base / path).open("w")

    write(to_dir)
elif __name__ == "<run_path>":  # how mkdocs-gen-files runs it, within a build
    import mkdocs_gen_files

    write(lambda path: mkdocs_gen_files.open(path, "w"))
