"""The Inspect AI adapter (emulator/eval/inspect_env.py): an Inspect eval, in this process, whose sandbox is a trial
of an `emulator eval` task and whose scorer is the task's checks.

The model is Inspect's mock model, whose outputs are written here: one call to Inspect's `bash()` tool that runs a
reference agent of examples/eval, then a final answer. No model provider is asked: a guard on this process's
sockets records any connection or name lookup beyond loopback, and the test asserts there was none."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from inspect_ai import eval as inspect_eval
from inspect_ai.log import EvalLog
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import CORRECT, INCORRECT, Score
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import bash

from emulator.eval.inspect_env import SANDBOX, EmulatorSandbox, emulator_task
from emulator.eval.tasks import load

ROOT = Path(__file__).resolve().parent.parent
TASK = ROOT / "fixtures" / "tasks" / "create-a-trial"
AGENTS = ROOT / "examples" / "eval"
LOOPBACK = {"127.0.0.1", "::1", "localhost", "0.0.0.0"}


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    """Inspect's logs in tmp_path and no display; the trials' state dirs in a temp dir of the test's own (so that
    what is left there is this test's, with other tests' trials running beside it); every connection or name
    lookup this process makes beyond loopback recorded."""
    monkeypatch.setenv("INSPECT_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setenv("INSPECT_DISPLAY", "none")
    for var in ("INSPECT_EVAL_MODEL", "INSPECT_EVAL_MODEL_ROLES"):
        monkeypatch.delenv(var, raising=False)
    # Short: the emulator's state dir holds sockets, whose paths have a length limit.
    temp = Path(tempfile.mkdtemp(prefix="pxt-insp-", dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    outside: list[str] = []
    connect, lookup = socket.socket.connect, socket.getaddrinfo

    def guarded_connect(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in LOOPBACK:
            outside.append(str(address))
        connect(self, address)

    def guarded_lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in LOOPBACK and host is not None:
            outside.append(str(host))
        return lookup(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_lookup)
    try:
        yield temp, outside
    finally:
        monkeypatch.undo()
        subprocess.run(["rm", "-rf", str(temp)], check=False)


def run_agent(script: str) -> tuple[EvalLog, Score]:
    """The mock model calls `bash()` once, to run the reference agent, then answers."""
    command = f"{sys.executable} {AGENTS / script}"  # a login shell may reset PATH: the interpreter by its path
    outputs = [
        ModelOutput.for_tool_call("mockllm/model", "bash", {"command": command}),
        ModelOutput.from_content("mockllm/model", "The trial organization is made."),
    ]
    for output in outputs:
        # Without usage, the mock model counts tokens with tiktoken, which downloads its encoding on first use.
        output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    model = get_model("mockllm/model", custom_outputs=outputs)
    task = emulator_task(TASK, solver=[use_tools(bash(timeout=60)), generate()], epochs=1)
    (log,) = inspect_eval(task, model=model, display="none", log_format="json", max_samples=1)
    assert log.status == "success", log.error
    assert log.samples is not None
    (sample,) = log.samples
    assert sample.scores is not None
    return log, sample.scores["emulator_checks"]


def our_processes(marker: str) -> list[str]:
    """Running processes whose command line names `marker` (the trials' temp dir, the agents' path)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline:
                found.append(f"{proc.name}: {cmdline}")
    return found


def test_the_careful_agent_scores_correct_and_the_hasty_one_incorrect_with_the_check_and_its_evidence(
    offline: tuple[Path, list[str]],
) -> None:
    temp, outside = offline

    log, score = run_agent("careful_agent.py")
    assert score.value == CORRECT, score.explanation
    task = load(TASK)
    # The task's checks, its request limit's, and every trial's tampering check.
    n = len(task.checks) + (task.max_requests is not None) + 1
    assert score.explanation is not None and score.explanation.startswith(f"{n} of {n} checks held")
    assert score.metadata is not None and all(c["passed"] for c in score.metadata["checks"])
    assert score.metadata["requests"] == 6  # as under `emulator eval`: the agent saw the same emulator
    assert log.eval.sandbox is not None and log.eval.sandbox.type == SANDBOX

    _, score = run_agent("hasty_agent.py")
    assert score.value == INCORRECT
    assert score.metadata is not None
    assert [c["check"] for c in score.metadata["checks"] if not c["passed"]] == ["scorecard_clean"]
    explanation = score.explanation or ""
    assert "FAILED scorecard_clean" in explanation and "hard-coded-url" in explanation, explanation

    assert outside == [], "Inspect reached beyond loopback"
    # Each sample's trial ended with it: no state dir, no emulator, no agent left.
    assert sorted(p.name for p in temp.glob("pxt-emulator-eval-*")) == []
    assert our_processes(str(temp)) == [] and our_processes(str(AGENTS)) == []


def test_the_sandbox_runs_commands_as_inspect_asks_and_its_cleanup_leaves_nothing(
    offline: tuple[Path, list[str]],
) -> None:
    temp, _ = offline
    marker = "4127"

    async def session() -> None:
        boxes = await EmulatorSandbox.sample_init("t", str(TASK), {})
        box = boxes["default"].as_type(EmulatorSandbox)
        try:
            r = await box.exec(["sh", "-c", 'cat; echo " $EMULATOR_URL $EXTRA"; pwd'], input="hi", env={"EXTRA": "x"})
            said, where = r.stdout.splitlines()
            assert r.success and said == f"hi {box.trial.env['EMULATOR_URL']} x"
            assert Path(where) == box.work and box.work.parent == box.trial.state

            await box.write_file("notes/a.txt", "one\r\ntwo")
            assert await box.read_file("notes/a.txt") == "one\r\ntwo"  # newlines as written
            assert (await box.exec(["cat", "a.txt"], cwd="notes")).stdout == "one\r\ntwo"
            with pytest.raises(PermissionError):
                await box.read_file("../emulator.log")  # the emulator's own files are not the sample's

            assert (await box.exec(["no-such-command"])).returncode == 127
            with pytest.raises(TimeoutError):
                await box.exec(["sh", "-c", f"sleep {marker}"], timeout=1)
            assert our_processes(f"sleep {marker}") == []  # stopped at its timeout
            await box.exec(["sh", "-c", f"sleep {marker}1 >/dev/null 2>&1 &"])
            assert our_processes(f"sleep {marker}1") != []  # a background process outlives its command...
        finally:
            await EmulatorSandbox.sample_cleanup("t", str(TASK), boxes, False)
        assert our_processes(f"sleep {marker}1") == []  # ...not the sample
        assert not box.trial.state.exists()

    anyio.run(session)
    assert sorted(p.name for p in temp.glob("pxt-emulator-eval-*")) == []
    assert our_processes(str(temp)) == []


def test_inspect_finds_the_sandbox_through_the_entry_point_and_the_emulator_runs_without_inspect(
    tmp_path: Path,
) -> None:
    """The entry point pyproject.toml declares, installed as a distribution's metadata (this checkout may run from
    another one's editable install): Inspect loads it when a task names `pxt-emulator`."""
    import tomllib

    points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["inspect_ai"]
    dist = tmp_path / "pxt_probe-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pxt-probe\nVersion: 0\n")
    (dist / "entry_points.txt").write_text("[inspect_ai]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()))
    probe = (
        "import sys\n"
        "from inspect_ai.util._sandbox.registry import registry_find_sandboxenv\n"
        "assert 'emulator.eval.inspect_env' not in sys.modules\n"
        f"print(registry_find_sandboxenv({SANDBOX!r}).__module__)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "emulator.eval.inspect_env", r.stderr

    # inspect_ai is imported by the adapter alone: `emulator eval` and the rest do without it.
    lean = "import sys, emulator.cli, emulator.eval.runner, emulator.eval.reports; print('inspect_ai' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", lean], capture_output=True, text=True, env=env, timeout=120)
    assert r.stdout.strip() == "False", r.stderr
