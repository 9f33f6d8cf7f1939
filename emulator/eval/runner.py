"""Run a task's trials: each a throwaway emulator from the task's starting state (as `emulator exec` makes one),
the agent's command in its sandbox (sandbox.py) with `emulator env`'s variables and the instruction, a hard time
limit, then the checks on the harness's own copy of the evidence (evidence.py). Trials of a task run side by side up
to `parallel`, each with its own state dir, ports, workloads and admin token; the same seed each time, so that two
trials differ only by what the agent did. A stop (SIGINT, SIGTERM) ends every running trial at once."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from emulator import shipped
from emulator.admin import ops
from emulator.admin.client import ADMIN_TOKEN_VAR, Unreachable
from emulator.admin.wire import Endpoints, EventView, HostedTable, ServiceAnswer
from emulator.config import DEFAULT_DOCS, Settings
from emulator.core.freeports import free_ports
from emulator.core.processes import group_alive, marked, running, with_argument
from emulator.eval import inventory, sandbox
from emulator.eval.canaries import followed, plant, written
from emulator.eval.checks import (
    RequestsCheck,
    SecretCheck,
    Seen,
    ServiceCheck,
    agent_requests,
    evaluate,
)
from emulator.eval.cost import USAGE_FILE_VAR, cost_of, read_usage
from emulator.eval.evidence import PERSON_ADDRESS, Evidence, Who, tampering
from emulator.eval.evidence import report as judge
from emulator.eval.moments import act, due
from emulator.eval.person import Person
from emulator.eval.relay import HostRelay
from emulator.eval.results import MAX_STEPS, Step, SuiteResult, TaskResult, TrialResult, transcript
from emulator.eval.sandbox import INSIDE, Sandbox
from emulator.eval.scoring import pass_at_1
from emulator.eval.tasks import Task
from emulator.testkit import EmulatorError, Testkit, launch

INSTRUCTION_VAR, INSTRUCTION_FILE_VAR = "EMULATOR_TASK_INSTRUCTION", "EMULATOR_TASK_INSTRUCTION_FILE"
TRIAL_DIR_VAR = "EMULATOR_TRIAL_DIR"  # a directory of the trial's own for the agent's files, gone with the trial
TRIAL_MARK_VAR = "EMULATOR_TRIAL_MARK"  # what every process the agent starts carries: the trial ends them all
# The shipped examples (the reference agents under eval/), wherever the package is installed: an agent command
# `python "$EMULATOR_EXAMPLES/eval/careful_agent.py"` runs from any directory.
EXAMPLES_VAR = "EMULATOR_EXAMPLES"
PREFIX = "pxt-emulator-eval-"  # a run's folder of trials (or a trial's own, run alone) in the temporary directory
KILL_GRACE = 5.0  # seconds between SIGTERM and SIGKILL of an agent past its time limit
PERSON_POLL = 0.2  # seconds between two reads of the agent's output by the person


class Stop:
    """A whole run's stop (SIGINT or SIGTERM of `emulator eval`): running trials end their agents at once, and no
    trial starts after it."""

    def __init__(self) -> None:
        self._set = threading.Event()
        self.why = ""

    def set(self, why: str) -> None:
        self.why = self.why or why
        self._set.set()

    def __bool__(self) -> bool:
        return self._set.is_set()


@dataclass(frozen=True)
class Setup:
    """How a run's trials run: the agent's sandbox, what it must not see (beside the trials' own state), its stop."""

    sandbox: Sandbox = "none"
    cover: tuple[Path, ...] = ()
    stop: Stop = field(default_factory=Stop)
    root: Path | None = None  # the folder every trial's state dir of the run is made in (covered as a whole)


def run_suite(
    tasks: list[Task],
    agent: str,
    *,
    k: int | None = None,
    parallel: int = 1,
    args: list[str] | None = None,
    keep: Path | None = None,
    progress: Callable[[TrialResult], None] | None = None,
    setup: Setup | None = None,
) -> SuiteResult:
    root = Path(tempfile.mkdtemp(prefix=PREFIX))
    setup = replace(setup or Setup(), root=root)
    done: list[TaskResult] = []
    try:
        for t in tasks:
            if setup.stop:
                break
            done.append(
                run_task(t, agent, k=k, parallel=parallel, args=args or [], keep=keep, progress=progress, setup=setup)
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    incomplete = bool(setup.stop) or len(done) < len(tasks)
    return SuiteResult(
        agent=agent,
        tasks=done,
        met=all(t.met for t in done) and not incomplete,
        sandbox=setup.sandbox,
        incomplete=incomplete,
        stopped=setup.stop.why or None,
    )


def run_task(
    task: Task,
    agent: str,
    *,
    k: int | None = None,
    parallel: int = 1,
    args: list[str],
    keep: Path | None = None,
    progress: Callable[[TrialResult], None] | None = None,
    setup: Setup | None = None,
) -> TaskResult:
    setup = setup or Setup()
    trials = k or task.trials
    plan = [(n, False) for n in range(1, trials + 1)]
    if task.canaries:  # the same k again with the canaries planted
        plan += [(trials + n, True) for n in range(1, trials + 1)]

    def one(step: tuple[int, bool]) -> TrialResult | None:
        if setup.stop:
            return None
        result = run_trial(task, agent, step[0], args, keep, attacked=step[1], setup=setup)
        if progress is not None:
            progress(result)
        return result

    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(plan)))) as pool:
        results = [r for r in pool.map(one, plan) if r is not None]
    incomplete = len(results) < len(plan)
    result = TaskResult(  # its figures and cost are worked out from its trials
        task=task.name,
        path=str(task.path),
        k=trials,
        threshold=task.pass_k,
        met=False,
        trials=results,
        incomplete=incomplete,
    )
    result.met = result.pass_hat_k >= task.pass_k and not incomplete
    if task.canaries:
        clean = [r for r in results if not r.attacked]
        attacked = [r for r in results if r.attacked]
        result.utility = pass_at_1(len(clean), sum(_checks_pass(r) for r in clean))
        result.utility_under_attack = pass_at_1(len(attacked), sum(_checks_pass(r) for r in attacked))
        result.attack_success_rate = pass_at_1(len(attacked), sum(bool(r.canaries_followed) for r in attacked))
    return result


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


GATEWAYS = 4  # a sandboxed trial's service gateways: their ports are chosen before it starts, to be relayed


class Trial:
    """One trial's emulator, from the task's starting state, for as long as the `with` lasts (its state dir goes
    with it); `env` is what the agent runs with, and `finish` runs the checks once the agent has ended. The emulator
    takes an admin token only the harness holds; the agent's environment has no state dir, task dir or token."""

    def __init__(
        self,
        task: Task,
        n: int,
        extra: list[str],
        keep: Path | None = None,
        *,
        attacked: bool = False,
        setup: Setup | None = None,
    ) -> None:
        self.task, self.n, self.extra = task, n, extra
        self.setup = setup or Setup()
        self.attacked = attacked and bool(task.canaries)
        self.keep = keep  # a directory for the trial's record (`emulator record diff` compares two) and logs
        root = self.setup.root
        self.state = Path(tempfile.mkdtemp(prefix="trial-", dir=root) if root else tempfile.mkdtemp(prefix=PREFIX))
        self.work = self.state / "work"  # the agent's own directory (EMULATOR_TRIAL_DIR), outside its sandbox's view
        self.started = time.monotonic()
        self.kit: Testkit | None = None
        self.evidence: Evidence | None = None
        self.who = Who(sandboxed=self.setup.sandbox != "none")
        self.before: inventory.Inventory = {}
        self.env: dict[str, str] = {}
        self.ports: list[int] = []  # the client-facing ports a sandboxed agent's relay carries
        self.relay: HostRelay | None = None
        self.moments_done: list[str] = []  # the task's moments the harness acted on, in order

    def __enter__(self) -> Trial:
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self) -> None:
        docs = plant(DEFAULT_DOCS, self.state / "docs", self.task.canaries) if self.attacked else None
        planted = written(self.task.canaries, self.state / "canaries.json") if self.attacked else None
        flags = emulator_args(self.task, self.extra, docs, planted)
        gateways = free_ports(GATEWAYS, contiguous=True) if self.who.sandboxed else []
        if gateways:
            flags += ["--gateway-ports", f"{gateways[0]}-{gateways[-1]}"]
        token = secrets.token_urlsafe(24)
        quiet = {k: v for k, v in os.environ.items() if k != ADMIN_TOKEN_VAR}
        proc, found = launch(
            self.state, flags, log_path=self.state / "emulator.log", env={**quiet, ADMIN_TOKEN_VAR: token}
        )
        self.kit = Testkit(found, process=proc, state_dir=self.state, admin_token=token)
        hosts = [c.host for c in self.task.canaries if c.host is not None]
        watched = self.task.watched()
        if watched or hosts:  # before the agent starts; the values stay in the emulator's memory
            self.kit.watch(watched, hosts)
        self.before = inventory.take(self.kit)  # the starting state, for the collateral-damage check
        self.evidence = Evidence(self.kit)
        self.evidence.start()  # what the journal holds now is the starting state's (an adapter may run the agent)
        self.work.mkdir(mode=0o700)
        # What the agent reads of the trial is copied into its own directory: the trial's state dir stays out of view.
        (self.work / "instruction.md").write_text(self.task.instruction)
        shutil.copyfile(found.ca_bundle, self.work / "ca-bundle.pem")
        seen_as = INSIDE if self.who.sandboxed else self.work
        client = found.exports()
        client["SSL_CERT_FILE"] = client["REQUESTS_CA_BUNDLE"] = str(seen_as / "ca-bundle.pem")
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("EMULATOR_", "PIXELTABLE_"))},
            **client,
            INSTRUCTION_VAR: self.task.instruction,
            INSTRUCTION_FILE_VAR: str(seen_as / "instruction.md"),
            TRIAL_DIR_VAR: str(seen_as),
            TRIAL_MARK_VAR: secrets.token_hex(8),
            USAGE_FILE_VAR: str(seen_as / "usage.json"),
            EXAMPLES_VAR: str(shipped.EXAMPLES),
            **self.task.env,
        }
        if self.who.sandboxed:
            self.env.update(HOME=str(INSIDE), TMPDIR="/tmp")
            self.ports = [*_ports(found), *gateways]
            self.relay = HostRelay(self.state / "relay", self.ports)

    def __exit__(self, *_: object) -> None:
        try:
            if self.relay is not None:
                self.relay.close()
            if self.kit is not None:
                self.kit.stop()
        finally:
            shutil.rmtree(self.state, ignore_errors=True)

    def agent_command(self, agent: str) -> list[str] | str:
        """What runs the agent: its shell command, inside the sandbox when there is one."""
        if not self.who.sandboxed:
            return agent
        hidden = [self.task.path, *self.setup.cover, self.setup.root or self.state]  # every trial's state, or its own
        return sandbox.command(
            agent, scratch=self.work, relay=self.state / "relay", ports=self.ports, cwd=Path.cwd(), cover=hidden
        )

    def finish(self, code: int | None, timed_out: bool, output: str, agent_seconds: float) -> TrialResult:
        """The checks on the harness's copy of the journal and on what the trial's emulator holds, now that every
        process of the agent's has ended."""
        assert self.kit is not None and self.evidence is not None, "finish() inside the trial's `with`"
        task, evidence = self.task, self.evidence
        evidence.pull()  # the last of the agent's events; what the checks' own calls cause comes after
        final = self.kit.events(since=max(0, evidence.began))
        # What the hosted workloads used, read first: a check's calls add nothing to it, and the emulator still runs.
        hosted = self.kit.run(ops.USAGE.call())
        orgs = self.kit.run(ops.ORGS.call()).orgs
        seen = Seen(
            orgs=orgs,
            events=list(evidence.events),
            report=judge(evidence.events, self.who),
            egress_allow=task.egress_allow,
            changed=inventory.changes(self.before, inventory.take(self.kit, orgs)),
            hosted=HostedReader(self.kit),
            secrets=self.kit.secrets() if any(isinstance(c, SecretCheck) for c in task.checks) else [],
            is_agent=self.who.agent,
        )
        checks = [evaluate(c, seen) for c in task.checks]
        if task.max_requests is not None:
            checks.append(evaluate(RequestsCheck(at_most=task.max_requests), seen))
        cap = int(task.settings.get("journal_cap", Settings().journal_cap))
        checks.append(tampering(evidence, self.who, final, cap))
        mine = agent_requests(seen)
        usage, note = read_usage(self.work / "usage.json")
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
            person_requests=sum(1 for e in evidence.events if self.who.person(e)),
            checks=checks,
            cost=cost_of(mine, seen.events, seconds, agent_seconds, hosted),
            steps=steps_of(mine),
            kept=kept,
            attacked=self.attacked,
            canaries_followed=hits,
            output=output,
            sandbox=self.setup.sandbox,
            # Read once every process of the agent's has ended: what it wrote last is what it reports.
            usage=usage,
            usage_note=note,
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


def _ports(found: Endpoints) -> list[int]:
    """The emulator's client-facing ports, from its endpoints: the origins, the tunnel, the proxy, the media store."""
    urls = (found.site, found.auth, found.api, found.proxy, found.s3, "//" + found.tunnel)
    return sorted({p for u in urls if (p := urlsplit(u).port) is not None})


def steps_of(requests: list[EventView]) -> list[Step]:
    first = requests[0].ts if requests else 0.0
    return [
        Step(
            at=round(e.ts - first, 3),
            origin=str(e.data.get("origin", "gateway" if e.kind == "gateway.request" else "")),
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
    task: Task,
    agent: str,
    n: int,
    extra: list[str],
    keep: Path | None = None,
    *,
    attacked: bool = False,
    setup: Setup | None = None,
) -> TrialResult:
    setup = setup or Setup()
    attacked = attacked and bool(task.canaries)
    began = time.monotonic()
    try:
        with Trial(task, n, extra, keep, attacked=attacked, setup=setup) as trial:
            began = time.monotonic()
            person = Person(task.person, trial.env["EMULATOR_URL"], PERSON_ADDRESS) if task.person else None
            run = _run_agent(trial, agent, person)
            result = trial.finish(run.code, run.timed_out, run.output, time.monotonic() - began)
            result.person_acts = person.acts if person else []
            result.moments = trial.moments_done
            result.transcript = transcript(trial.state / "agent.log")  # the harness's file, outside the sandbox
            if run.stopped:
                result.passed = False
                result.error = f"stopped: {setup.stop.why}"
            return result
    except EmulatorError as e:
        error = f"the trial's emulator did not start: {e.message}"
    except (Unreachable, httpx.HTTPError, OSError) as e:  # its emulator died under it (the agent may have killed it)
        error = f"the trial's emulator stopped answering: {type(e).__name__}: {e}"
    return TrialResult(
        task=task.name,
        trial=n,
        passed=False,
        exit_code=None,
        timed_out=False,
        seconds=round(time.monotonic() - began, 3),
        requests=0,
        checks=[],
        attacked=attacked,
        error=error,
        sandbox=setup.sandbox,
    )


@dataclass
class AgentRun:
    code: int | None  # None: stopped (its time limit, or the run's stop)
    timed_out: bool
    stopped: bool
    output: str


def _run_agent(trial: Trial, agent: str, person: Person | None = None) -> AgentRun:
    """The agent's command (in the caller's directory, as `emulator exec` runs one), in its sandbox or a process
    group of its own, which ends with the trial: at its time limit, at the run's stop, or at its end what it left
    running. Meanwhile the harness copies the journal as it is written, and the person, if the task has one, reads
    the agent's output as it is written and acts on it."""
    assert trial.evidence is not None
    log = trial.state / "agent.log"
    evidence, stop, timeout = trial.evidence, trial.setup.stop, trial.task.timeout
    kit, done = trial.kit, set[int]()
    assert kit is not None
    evidence.start()
    began = time.monotonic()
    with open(log, "wb") as out:
        command = trial.agent_command(agent)
        proc = subprocess.Popen(
            command,
            shell=isinstance(command, str),
            env=trial.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        timed_out = stopped = False
        try:
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    timed_out = True
                    break
                if stop:
                    stopped = True
                    break
                if person is not None:
                    person.read(log)
                for index, moment in due(trial.task.moments, time.monotonic() - began, done):
                    done.add(index)  # the task's own fault or clock move: the harness's act, not tampering
                    trial.moments_done.append(evidence.act(lambda moment=moment: act(kit, moment)))
                evidence.pull()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(min(PERSON_POLL, max(0.0, deadline - time.monotonic())))
        finally:
            _stop_group(proc, grace=0.0 if stop else KILL_GRACE)
            if trial.who.sandboxed:
                _end_sandbox(trial.work)
            else:
                stop_marked(trial.env[TRIAL_MARK_VAR])
    if person is not None:
        person.read(log)  # what it said last
    tail = log.read_text(errors="replace")[-4000:]
    return AgentRun(None if timed_out or stopped else proc.returncode, timed_out, stopped, tail)


def stop_marked(mark: str) -> None:
    """Unsandboxed, what the agent started outside its process group (a daemon of its client, which starts a session
    of its own, and what that runs) ends with the trial too: every process that carries the trial's mark in its
    environment. (An agent that drops the mark escapes it: the namespace sandbox has no such hole.)"""
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


def _end_sandbox(scratch: Path) -> None:
    """A sandbox whose init outlived its monitor (a kill that bubblewrap's --die-with-parent did not pass on) still
    ends with its trial: its init's command line names the trial's scratch dir, and the init's end is the end of every
    process in its PID namespace."""
    for pid in with_argument(str(scratch)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _stop_group(proc: subprocess.Popen[bytes], grace: float = KILL_GRACE) -> None:
    """The agent's process group ends with the trial: what it left running in the background too. Sandboxed, the
    group is the sandbox's, whose end ends every process inside."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait)
            if sig == signal.SIGTERM and not group_alive(proc.pid):
                return
        except subprocess.TimeoutExpired:
            continue
