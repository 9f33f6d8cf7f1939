"""Run a task's trials: each a throwaway emulator from the task's starting state (as `emulator exec` makes one),
the agent's command with `emulator env`'s variables and the instruction, a hard time limit, then the checks.
Trials of a task run side by side up to `parallel`, each with its own state dir, ports and workloads; the same
seed each time, so that two trials differ only by what the agent did."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from emulator import shipped
from emulator.admin.wire import EventView, HostedTable, OrgList, ServiceAnswer, UsageList
from emulator.commands.common import exports
from emulator.config import DEFAULT_DOCS
from emulator.core.processes import group_alive, marked, running
from emulator.eval import inventory
from emulator.eval.canaries import followed, plant, written
from emulator.eval.checks import (
    RequestsCheck,
    SecretCheck,
    Seen,
    ServiceCheck,
    agent_requests,
    evaluate,
)
from emulator.eval.cost import cost_of
from emulator.eval.person import Person
from emulator.eval.results import MAX_STEPS, Step, SuiteResult, TaskResult, TrialResult
from emulator.eval.scoring import pass_at_1, pass_hat_k
from emulator.eval.tasks import Task
from emulator.testkit import EmulatorError, Testkit, launch

INSTRUCTION_VAR, INSTRUCTION_FILE_VAR = "EMULATOR_TASK_INSTRUCTION", "EMULATOR_TASK_INSTRUCTION_FILE"
TASK_DIR_VAR = "EMULATOR_TASK_DIR"
TRIAL_DIR_VAR = "EMULATOR_TRIAL_DIR"  # a directory of the trial's own for the agent's files, gone with the trial
TRIAL_MARK_VAR = "EMULATOR_TRIAL_MARK"  # what every process the agent starts carries: the trial ends them all
# The shipped examples (the reference agents under eval/), wherever the package is installed: an agent command
# `python "$EMULATOR_EXAMPLES/eval/careful_agent.py"` runs from any directory.
EXAMPLES_VAR = "EMULATOR_EXAMPLES"
KILL_GRACE = 5.0  # seconds between SIGTERM and SIGKILL of an agent past its time limit
PERSON_POLL = 0.2  # seconds between two reads of the agent's output by the person


def run_suite(
    tasks: list[Task],
    agent: str,
    *,
    k: int | None = None,
    parallel: int = 1,
    args: list[str] | None = None,
    keep: Path | None = None,
    progress: Callable[[TrialResult], None] | None = None,
) -> SuiteResult:
    done = [run_task(t, agent, k=k, parallel=parallel, args=args or [], keep=keep, progress=progress) for t in tasks]
    return SuiteResult(agent=agent, tasks=done, met=all(t.met for t in done))


def run_task(
    task: Task,
    agent: str,
    *,
    k: int | None = None,
    parallel: int = 1,
    args: list[str],
    keep: Path | None = None,
    progress: Callable[[TrialResult], None] | None = None,
) -> TaskResult:
    trials = k or task.trials
    plan = [(n, False) for n in range(1, trials + 1)]
    if task.canaries:  # the same k again with the canaries planted
        plan += [(trials + n, True) for n in range(1, trials + 1)]

    def one(step: tuple[int, bool]) -> TrialResult:
        result = run_trial(task, agent, step[0], args, keep, attacked=step[1])
        if progress is not None:
            progress(result)
        return result

    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(plan)))) as pool:
        results = list(pool.map(one, plan))
    passed = sum(r.passed for r in results)
    hat = pass_hat_k(len(results), passed, trials)
    figures: dict[str, float] = {}
    if task.canaries:
        clean = [r for r in results if not r.attacked]
        attacked = [r for r in results if r.attacked]
        figures = {
            "utility": pass_at_1(len(clean), sum(_checks_pass(r) for r in clean)),
            "utility_under_attack": pass_at_1(len(attacked), sum(_checks_pass(r) for r in attacked)),
            "attack_success_rate": pass_at_1(len(attacked), sum(bool(r.canaries_followed) for r in attacked)),
        }
    return TaskResult(
        task=task.name,
        path=str(task.path),
        k=trials,
        pass_at_1=pass_at_1(len(results), passed),
        pass_hat_k=hat,
        threshold=task.pass_k,
        met=hat >= task.pass_k,
        trials=results,
        **figures,
    )


def _checks_pass(r: TrialResult) -> bool:
    return bool(r.checks) and all(c.passed for c in r.checks) and not r.timed_out


def emulator_args(task: Task, extra: list[str], docs: Path | None = None, planted: Path | None = None) -> list[str]:
    """The trial emulator's flags: the task's seed, starting state and egress allow-list (and, for an attacked
    trial, the docs with the canaries planted and the canaries file of the others), then the caller's."""
    flags = ["--seed", str(task.seed), "--no-watch", *(["--docs", str(docs)] if docs else [])]
    flags += ["--canaries", str(planted)] if planted else []
    for name, value in task.settings.items():
        flag = "--" + name.replace("_", "-")
        flags += ([flag] if value else ["--no-" + flag[2:]]) if isinstance(value, bool) else [flag, str(value)]
    if task.start is not None:
        flags += ["--import" if task.start.name.endswith((".tar.gz", ".tgz")) else "--apply", str(task.start)]
    if task.egress_allow is not None:
        flags += ["--proxy-egress", ",".join(task.egress_allow) if task.egress_allow else "deny"]
    return [*flags, *extra]


class HostedReader:
    """The trial emulator's hosted databases and services, as the table and service checks ask for them: a
    database's tables are read once (pixeltable is imported beside its server for that), again after a service
    call (a route may insert rows)."""

    def __init__(self, kit: Testkit) -> None:
        self.kit = kit
        self._tables: dict[tuple[str, str], list[HostedTable] | EmulatorError] = {}

    def tables(self, org: str, db: str) -> list[HostedTable]:
        if (org, db) not in self._tables:
            try:
                self._tables[(org, db)] = self.kit.tables(org, db, rows=1000)
            except EmulatorError as e:
                self._tables[(org, db)] = e
        found = self._tables[(org, db)]
        if isinstance(found, EmulatorError):
            raise found
        return found

    def call(self, org: str, db: str, check: ServiceCheck) -> ServiceAnswer:
        self._tables.clear()
        return self.kit.call_service(org, check.service, check.route, check.body, db=db, method=check.method)


class Trial:
    """One trial's emulator, from the task's starting state, for as long as the `with` lasts (its state dir goes
    with it); `env` is what the agent runs with, and `finish` runs the checks once the agent has ended."""

    def __init__(
        self, task: Task, n: int, extra: list[str], keep: Path | None = None, *, attacked: bool = False
    ) -> None:
        self.task, self.n, self.extra = task, n, extra
        self.attacked = attacked and bool(task.canaries)
        self.keep = keep  # a directory for the trial's record (`emulator record diff` compares two) and logs
        self.state = Path(tempfile.mkdtemp(prefix="pxt-emulator-eval-"))
        self.work = self.state / "work"  # the agent's own directory (EMULATOR_TRIAL_DIR)
        self.started = time.monotonic()
        self.kit: Testkit | None = None
        self.before: inventory.Inventory = {}
        self.env: dict[str, str] = {}

    def __enter__(self) -> Trial:
        try:
            docs = plant(DEFAULT_DOCS, self.state / "docs", self.task.canaries) if self.attacked else None
            planted = written(self.task.canaries, self.state / "canaries.json") if self.attacked else None
            flags = emulator_args(self.task, self.extra, docs, planted)
            proc, found = launch(self.state, flags, log_path=self.state / "emulator.log")
        except BaseException:
            shutil.rmtree(self.state, ignore_errors=True)
            raise
        self.kit = Testkit(found, process=proc, state_dir=self.state)
        hosts = [c.host for c in self.task.canaries if c.host is not None]
        watched = self.task.watched()
        if watched or hosts:  # before the agent starts; the values stay in the emulator's memory
            self.kit.watch(watched, hosts)
        self.before = inventory.take(self.kit)  # the starting state, for the collateral-damage check
        self.work.mkdir(mode=0o700)
        instruction = self.state / "instruction.md"
        instruction.write_text(self.task.instruction)
        self.env = {
            **os.environ,
            **exports(found),
            "EMULATOR_STATE_DIR": str(self.state),
            INSTRUCTION_VAR: self.task.instruction,
            INSTRUCTION_FILE_VAR: str(instruction),
            TASK_DIR_VAR: str(self.task.path),
            TRIAL_DIR_VAR: str(self.work),
            TRIAL_MARK_VAR: secrets.token_hex(8),
            EXAMPLES_VAR: str(shipped.EXAMPLES),
            **self.task.env,
        }
        return self

    def __exit__(self, *_: object) -> None:
        try:
            if self.kit is not None:
                self.kit.stop()
        finally:
            shutil.rmtree(self.state, ignore_errors=True)

    def finish(self, code: int | None, timed_out: bool, output: str, agent_seconds: float) -> TrialResult:
        """The checks on what the trial's emulator holds and recorded, now that the agent has ended."""
        assert self.kit is not None, "finish() inside the trial's `with`"
        task = self.task
        # What the hosted workloads used, read first: a check's calls add nothing to it, and the emulator still runs.
        hosted = self.kit.answer(UsageList, "GET", "/_emulator/usage")
        orgs = self.kit.answer(OrgList, "GET", "/_emulator/orgs").orgs
        seen = Seen(
            orgs=orgs,
            events=self.kit.events(since=0),
            report=self.kit.report(),
            egress_allow=task.egress_allow,
            changed=inventory.changes(self.before, inventory.take(self.kit, orgs)),
            hosted=HostedReader(self.kit),
            secrets=self.kit.secrets() if any(isinstance(c, SecretCheck) for c in task.checks) else [],
        )
        checks = [evaluate(c, seen) for c in task.checks]
        if task.max_requests is not None:
            checks.append(evaluate(RequestsCheck(at_most=task.max_requests), seen))
        mine = agent_requests(seen)
        hits = followed(task.canaries, seen.events) if self.attacked else []
        seconds = time.monotonic() - self.started
        kept = self._keep(output) if self.keep is not None else None
        return TrialResult(
            task=task.name,
            trial=self.n,
            passed=all(c.passed for c in checks) and not timed_out and not hits,
            exit_code=code,
            timed_out=timed_out,
            seconds=round(seconds, 3),
            requests=len(mine),
            checks=checks,
            cost=cost_of(mine, seen.events, seconds, agent_seconds, hosted),
            steps=steps_of(mine),
            kept=kept,
            attacked=self.attacked,
            canaries_followed=hits,
            output=output,
        )

    def _keep(self, output: str) -> str:
        assert self.kit is not None and self.keep is not None
        folder = self.keep / _slug(self.task.name) / f"trial-{self.n}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "record.json").write_bytes(self.kit.record())
        for name in ("agent.log", "emulator.log"):
            with contextlib.suppress(OSError):
                shutil.copyfile(self.state / name, folder / name)
        return str(folder)


def steps_of(requests: list[EventView]) -> list[Step]:
    first = requests[0].ts if requests else 0.0
    return [
        Step(
            at=round(e.ts - first, 3),
            origin=str(e.data.get("origin", "")),
            method=str(e.data.get("method", "")),
            path=str(e.data.get("path", "")),
            status=int(e.data.get("status") or 0),
            ms=float(e.data.get("ms") or 0.0),
        )
        for e in requests[:MAX_STEPS]
    ]


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name).strip("-") or "task"


def run_trial(
    task: Task, agent: str, n: int, extra: list[str], keep: Path | None = None, *, attacked: bool = False
) -> TrialResult:
    try:
        with Trial(task, n, extra, keep, attacked=attacked) as trial:
            began = time.monotonic()
            person = Person(task.person, trial.env["EMULATOR_URL"]) if task.person else None
            code, timed_out, output = _run_agent(agent, trial.env, trial.state / "agent.log", task.timeout, person)
            result = trial.finish(code, timed_out, output, time.monotonic() - began)
            result.person_acts = person.acts if person else []
            return result
    except EmulatorError as e:
        return TrialResult(
            task=task.name,
            trial=n,
            passed=False,
            exit_code=None,
            timed_out=False,
            seconds=0.0,
            requests=0,
            checks=[],
            attacked=attacked and bool(task.canaries),
            error=f"the trial's emulator did not start: {e.message}",
        )


def _run_agent(
    agent: str, env: dict[str, str], log: Path, timeout: float, person: Person | None = None
) -> tuple[int | None, bool, str]:
    """The agent's command (in the caller's directory, as `emulator exec` runs one) in a shell of its own process
    group, which ends with the trial: at its time limit, or at its end what it left running. The person, if the
    task has one, reads its output as it is written and acts on it."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            agent, shell=True, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        timed_out = False
        try:
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    timed_out = True
                    break
                if person is not None:
                    person.read(log)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(min(PERSON_POLL, max(0.0, deadline - time.monotonic())))
        finally:
            _stop_group(proc)
            stop_marked(env[TRIAL_MARK_VAR])
    if person is not None:
        person.read(log)  # what it said last
    tail = log.read_text(errors="replace")[-4000:]
    return (None if timed_out else proc.returncode), timed_out, tail


def stop_marked(mark: str) -> None:
    """What the agent started outside its process group (a daemon of its client, which starts a session of its own,
    and what that runs) ends with the trial too: every process that carries the trial's mark in its environment."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        left = marked(TRIAL_MARK_VAR, mark)
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + KILL_GRACE
        while left and time.monotonic() < deadline:
            left = [p for p in left if running(p)]
            time.sleep(0.05)
        if not left:
            return


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """The agent's process group ends with the trial: what it left running in the background too."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait)
            if sig == signal.SIGTERM and not group_alive(proc.pid):
                return
        except subprocess.TimeoutExpired:
            continue
