"""Run a task's trials: each a throwaway emulator from the task's starting state (as `emulator exec` makes one),
the agent's command with `emulator env`'s variables and the instruction, a hard time limit, then the checks.
Trials of a task run side by side up to `parallel`, each with its own state dir, ports and workloads; the same
seed each time, so that two trials differ only by what the agent did."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec

from emulator.admin.wire import OrgList
from emulator.commands.common import exports
from emulator.eval.checks import CheckResult, Seen, agent_requests, evaluate
from emulator.eval.scoring import pass_at_1, pass_hat_k
from emulator.eval.tasks import Task
from emulator.testkit import EmulatorError, Testkit, launch

INSTRUCTION_VAR, INSTRUCTION_FILE_VAR = "EMULATOR_TASK_INSTRUCTION", "EMULATOR_TASK_INSTRUCTION_FILE"
TASK_DIR_VAR = "EMULATOR_TASK_DIR"
KILL_GRACE = 5.0  # seconds between SIGTERM and SIGKILL of an agent past its time limit


class TrialResult(msgspec.Struct, kw_only=True):
    task: str
    trial: int
    passed: bool
    exit_code: int | None  # None: killed at its time limit
    timed_out: bool
    seconds: float
    requests: int
    checks: list[CheckResult]
    error: str | None = None  # the trial could not run (the emulator did not start)
    output: str = ""  # the tail of the agent's output


class TaskResult(msgspec.Struct, kw_only=True):
    task: str
    path: str
    k: int
    pass_at_1: float
    pass_hat_k: float
    threshold: float
    met: bool
    trials: list[TrialResult]


class SuiteResult(msgspec.Struct, kw_only=True):
    agent: str
    tasks: list[TaskResult]
    met: bool


def run_suite(
    tasks: list[Task],
    agent: str,
    *,
    k: int | None = None,
    parallel: int = 1,
    args: list[str] | None = None,
    progress: Callable[[TrialResult], None] | None = None,
) -> SuiteResult:
    done = [run_task(t, agent, k=k, parallel=parallel, args=args or [], progress=progress) for t in tasks]
    return SuiteResult(agent=agent, tasks=done, met=all(t.met for t in done))


def run_task(
    task: Task,
    agent: str,
    *,
    k: int | None = None,
    parallel: int = 1,
    args: list[str],
    progress: Callable[[TrialResult], None] | None = None,
) -> TaskResult:
    trials = k or task.trials

    def one(n: int) -> TrialResult:
        result = run_trial(task, agent, n, args)
        if progress is not None:
            progress(result)
        return result

    with ThreadPoolExecutor(max_workers=max(1, min(parallel, trials))) as pool:
        results = list(pool.map(one, range(1, trials + 1)))
    passed = sum(r.passed for r in results)
    hat = pass_hat_k(trials, passed, trials)
    return TaskResult(
        task=task.name,
        path=str(task.path),
        k=trials,
        pass_at_1=pass_at_1(trials, passed),
        pass_hat_k=hat,
        threshold=task.pass_k,
        met=hat >= task.pass_k,
        trials=results,
    )


def emulator_args(task: Task, extra: list[str]) -> list[str]:
    """The trial emulator's flags: the task's seed, starting state and egress allow-list, then the caller's."""
    flags = ["--seed", str(task.seed), "--no-watch"]
    if task.start is not None:
        flags += ["--import" if task.start.name.endswith((".tar.gz", ".tgz")) else "--apply", str(task.start)]
    if task.egress_allow is not None:
        flags += ["--proxy-egress", ",".join(task.egress_allow) if task.egress_allow else "deny"]
    return [*flags, *extra]


def run_trial(task: Task, agent: str, n: int, extra: list[str]) -> TrialResult:
    state = Path(tempfile.mkdtemp(prefix="pxt-emulator-eval-"))
    started = time.monotonic()
    try:
        try:
            proc, found = launch(state, emulator_args(task, extra), log_path=state / "emulator.log")
        except EmulatorError as e:
            return _broken(task, n, f"the trial's emulator did not start: {e.message}")
        kit = Testkit(found, process=proc, state_dir=state)
        try:
            instruction = state / "instruction.md"
            instruction.write_text(task.instruction)
            env = {
                **os.environ,
                **exports(found),
                "EMULATOR_STATE_DIR": str(state),
                INSTRUCTION_VAR: task.instruction,
                INSTRUCTION_FILE_VAR: str(instruction),
                TASK_DIR_VAR: str(task.path),
                **task.env,
            }
            code, timed_out, output = _run_agent(agent, env, state / "agent.log", task.timeout)
            seen = _read(kit, task)
            checks = [evaluate(c, seen) for c in task.checks]
            if task.max_requests is not None:
                from emulator.eval.checks import RequestsCheck

                checks.append(evaluate(RequestsCheck(at_most=task.max_requests), seen))
            return TrialResult(
                task=task.name,
                trial=n,
                passed=all(c.passed for c in checks) and not timed_out,
                exit_code=code,
                timed_out=timed_out,
                seconds=round(time.monotonic() - started, 3),
                requests=len(agent_requests(seen)),
                checks=checks,
                output=output,
            )
        finally:
            kit.stop()
    finally:
        shutil.rmtree(state, ignore_errors=True)


def _broken(task: Task, n: int, error: str) -> TrialResult:
    return TrialResult(
        task=task.name,
        trial=n,
        passed=False,
        exit_code=None,
        timed_out=False,
        seconds=0.0,
        requests=0,
        checks=[],
        error=error,
    )


def _run_agent(agent: str, env: dict[str, str], log: Path, timeout: float) -> tuple[int | None, bool, str]:
    """The agent's command (in the caller's directory, as `emulator exec` runs one) in a shell of its own process
    group, which ends with the trial: at its time limit, or at its end what it left running."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            agent, shell=True, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        timed_out = False
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _stop_group(proc)
    tail = log.read_text(errors="replace")[-4000:]
    return (None if timed_out else proc.returncode), timed_out, tail


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """The agent's process group ends with the trial: what it left running in the background too."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait)
            if sig == signal.SIGTERM and not _group_alive(proc.pid):
                return
        except subprocess.TimeoutExpired:
            continue


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _read(kit: Testkit, task: Task) -> Seen:
    return Seen(
        orgs=kit.answer(OrgList, "GET", "/_emulator/orgs").orgs,
        events=kit.events(since=0),
        report=kit.report(),
        egress_allow=task.egress_allow,
    )
