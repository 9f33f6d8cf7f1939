"""The pytest plugin (entry point `pytest11`, so installing the package is enough): an `emulator` fixture.

- `emulator` (session): one emulator for the whole run, started on free ports in a temporary state directory and
  stopped at the end; or the one at `--emulator-url` / `EMULATOR_URL` (left running); or, with `--emulator-reuse`,
  one kept running between runs in `.pytest_cache` (Testcontainers' reuse; `emulator down --state-dir …` stops it);
  or, with `--emulator-container IMAGE`, a container of the emulator's image (kept between runs with the reuse flag).
- Each test that uses it starts from the same state: the state the emulator started from (`--emulator-isolation
  start`, the default: empty, or `--emulator-apply` / `--emulator-import`), an empty one (`empty`), a snapshot
  (`@pytest.mark.emulator(snapshot="seeded")`), or whatever the last test left (`none`).
- `emulator_env` (function): the variables `emulator env` prints, set in `os.environ` for the test.
- A failed test that used the emulator shows the events it caused, under "emulator events".

The helpers are those of `emulator.testkit.Testkit`: `emulator.clock`, `.acts`, `.faults`, `.snapshots`,
`.events()`, `.assert_event()`, `.reset()`, `.apply()`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from emulator.testkit import EmulatorError, Testkit

ISOLATION = ("start", "empty", "none")
_KIT = pytest.StashKey[Testkit]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("emulator", "Pixeltable Cloud emulator (the `emulator` fixture)")
    group.addoption("--emulator-url", help="use the emulator running at this site URL (default: EMULATOR_URL)")
    group.addoption(
        "--emulator-reuse",
        action="store_true",
        default=None,
        help="keep the emulator running after the run and use it again in the next one (stop it with "
        "`emulator down --state-dir .pytest_cache/d/pxt-emulator`)",
    )
    group.addoption("--emulator-isolation", choices=ISOLATION, help="what each test starts from (default: start)")
    group.addoption("--emulator-apply", metavar="FILE", help="start from this declared state (TOML)")
    group.addoption("--emulator-import", metavar="FILE", help="start from this export (.tar.gz)")
    group.addoption("--emulator-runtime", choices=["auto", "docker", "process"], help="where hosted databases run")
    group.addoption(
        "--emulator-container",
        metavar="IMAGE",
        help="run the emulator as a container of this image (`emulator image build` makes pxt-emulator:local), "
        "through the Testcontainers module; with --emulator-reuse the container is kept for the next run",
    )
    parser.addini("emulator_isolation", "what each test starts from: start, empty or none", default="start")
    parser.addini("emulator_reuse", "keep the emulator between runs", type="bool", default=False)
    parser.addini("emulator_apply", "a declared state (TOML) to start from, relative to the rootdir", default="")
    parser.addini("emulator_import", "an export (.tar.gz) to start from, relative to the rootdir", default="")
    parser.addini("emulator_runtime", "where hosted databases run: auto, docker or process", default="process")
    parser.addini("emulator_args", "more flags for `emulator up`", type="args", default=[])
    parser.addini("emulator_container", "run the emulator as a container of this image", default="")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "emulator(isolation='start'|'empty'|'none', snapshot=NAME): what this test starts from "
        "(a snapshot is loaded before the test)",
    )


def _option(config: pytest.Config, name: str) -> Any:
    value = config.getoption(f"emulator_{name}")
    return value if value is not None else config.getini(f"emulator_{name}")


def _file(config: pytest.Config, name: str) -> str | None:
    """A start file: a flag is relative to where pytest runs, an ini value to the rootdir."""
    flag = config.getoption(f"emulator_{name}")
    if flag:
        return str(Path(flag).absolute())
    ini = config.getini(f"emulator_{name}")
    return str(config.rootpath / ini) if ini else None


def _up_args(config: pytest.Config) -> list[str]:
    args = ["--runtime", str(_option(config, "runtime"))]
    for name in ("apply", "import"):
        path = _file(config, name)
        if path:
            args += [f"--{name}", path]
    return args + list(config.getini("emulator_args"))


def _container_command(config: pytest.Config) -> list[str]:
    """`emulator up` in the container, as the process mode runs it (Testkit.start): the ini's `emulator_args`, and
    the throwaway profile unless they name one (the runtime and the start files are the container's variables)."""
    args = list(config.getini("emulator_args"))
    profile = [] if any(a.startswith("--profile") for a in args) else ["--profile", "throwaway"]
    return ["up", *profile, *args]


def pytest_report_header(config: pytest.Config) -> str:
    url = config.getoption("emulator_url") or os.environ.get("EMULATOR_URL")
    where = f"at {url}" if url else ("reused between runs" if _option(config, "reuse") else "started for this run")
    if not url and _option(config, "container"):
        where += f" in a container of {_option(config, 'container')}"
    return f"emulator: {where}, each test from its {_option(config, 'isolation')} state"


@pytest.fixture(scope="session")
def emulator(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testkit]:
    """One emulator for the session (see the module's docstring for where it comes from)."""
    config = request.config
    url = config.getoption("emulator_url") or os.environ.get("EMULATOR_URL")
    if not url and _option(config, "container"):
        yield from _in_container(config)
        return
    try:
        if url:
            kit = Testkit.attach(url)
        elif _option(config, "reuse"):
            cache = config.cache
            state = cache.mkdir("pxt-emulator") if cache is not None else tmp_path_factory.mktemp("pxt-emulator")
            kit = Testkit.reuse(Path(state), _up_args(config))
        else:
            kit = Testkit.start(tmp_path_factory.mktemp("pxt-emulator"), _up_args(config))
    except EmulatorError as e:
        pytest.fail(f"emulator: {e.message}", pytrace=False)
    yield from _held(config, kit, kit.stop)


def _held(config: pytest.Config, kit: Testkit, stop: Callable[[], object]) -> Iterator[Testkit]:
    """The session's emulator, where the hooks find it, until `stop` ends it with the session."""
    config.stash[_KIT] = kit
    try:
        yield kit
    finally:
        del config.stash[_KIT]
        stop()


def _in_container(config: pytest.Config) -> Iterator[Testkit]:
    """The session's emulator as a container (the Testcontainers module), its start files mounted read-only."""
    from emulator.container.testcontainer import PxtEmulatorContainer

    container = PxtEmulatorContainer(
        str(_option(config, "container")),
        runtime=str(_option(config, "runtime")),
        reuse=bool(_option(config, "reuse")),
        command=_container_command(config),
    )
    for name, variable in (("apply", "EMULATOR_APPLY"), ("import", "EMULATOR_IMPORT")):
        path = _file(config, name)
        if path:
            inside = f"/start/{name}-{Path(path).name}"
            container.with_volume_mapping(path, inside, "ro").with_env(variable, inside)
    try:
        container.start()
    except Exception as e:  # Docker's and Testcontainers' errors alike: the session cannot have its emulator
        pytest.fail(f"emulator: the container of {_option(config, 'container')} did not start: {e}", pytrace=False)
    yield from _held(config, container.testkit(), container.stop)


@pytest.fixture(autouse=True)
def _emulator_isolation(request: pytest.FixtureRequest) -> None:
    """Before each test that uses `emulator`: back to the state it starts from (reset or snapshot)."""
    if "emulator" not in request.fixturenames:
        return
    kit: Testkit = request.getfixturevalue("emulator")
    marker = request.node.get_closest_marker("emulator")
    wanted = dict(marker.kwargs) if marker else {}
    isolation = wanted.get("isolation") or _option(request.config, "isolation")
    if isolation not in ISOLATION:
        pytest.fail(f"emulator isolation {isolation!r}: use one of {', '.join(ISOLATION)}", pytrace=False)
    if wanted.get("snapshot"):
        kit.snapshots.load(str(wanted["snapshot"]))
    elif isolation != "none":
        kit.reset(to=isolation)
    kit.begin_test()


@pytest.fixture
def emulator_env(emulator: Testkit, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """`emulator env`'s variables, set for this test (an agent under test finds the emulator through them)."""
    for name, value in emulator.env.items():
        monkeypatch.setenv(name, value)
    return emulator.env


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    kit = item.config.stash.get(_KIT, None)
    if report.failed and call.when == "call" and kit is not None and "emulator" in getattr(item, "fixturenames", ()):
        try:
            report.sections.append(("emulator events", kit.describe_events() or "(none)"))
        except Exception as e:  # the emulator may be the reason the test failed
            report.sections.append(("emulator events", f"(could not be read: {e})"))
    return report
