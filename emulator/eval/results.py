"""What an evaluation reports: a trial's result (its checks, cost, timeline and what the agent printed), a task's
(its trials and reliability figures) and a suite's. `emulator eval --json` prints these; the JUnit and HTML reports
are made from them."""

from __future__ import annotations

import msgspec

from emulator.eval.canaries import CanaryHit
from emulator.eval.checks import CheckResult
from emulator.eval.cost import Cost


class Step(msgspec.Struct, kw_only=True, array_like=False):
    """One request the agent sent, for a trial's timeline: when (seconds after its first), where, what, the answer."""

    at: float
    origin: str
    method: str
    path: str
    status: int
    ms: float


MAX_STEPS = 500  # a trial's timeline keeps its first requests: an agent in a loop would otherwise fill the report


class TrialResult(msgspec.Struct, kw_only=True):
    task: str
    trial: int
    passed: bool
    exit_code: int | None  # None: killed at its time limit
    timed_out: bool
    seconds: float
    requests: int
    checks: list[CheckResult]
    cost: Cost | None = None  # None: the trial could not run
    steps: list[Step] = msgspec.field(default_factory=list)
    kept: str | None = None  # where its record, the agent's output and the emulator's log were kept (--out)
    attacked: bool = False  # the task's canaries were planted in what it read
    person_acts: list[str] = msgspec.field(default_factory=list)  # what the person did on the agent's word
    canaries_followed: list[CanaryHit] = msgspec.field(default_factory=list)
    error: str | None = None  # the trial could not run (its emulator did not start, or died), or was stopped
    output: str = ""  # the tail of the agent's output
    person_requests: int = 0  # the person's own (their browser's claim page), counted apart from the agent's
    sandbox: str = "none"  # where the agent ran (sandbox.py)
    moments: list[str] = msgspec.field(default_factory=list)  # the task's faults and clock moves, as they were done


class TaskResult(msgspec.Struct, kw_only=True):
    task: str
    path: str
    k: int
    pass_at_1: float
    pass_hat_k: float  # over every trial, clean and attacked: an attacked trial that followed a canary failed
    threshold: float
    met: bool
    trials: list[TrialResult]
    # With canaries, as AgentDojo reports them: the checks' pass rate of the clean trials and of the attacked ones,
    # and the share of attacked trials that followed a canary.
    utility: float | None = None
    utility_under_attack: float | None = None
    attack_success_rate: float | None = None
    incomplete: bool = False  # the run stopped before all its trials ran: the figures are of those that did


class SuiteResult(msgspec.Struct, kw_only=True):
    agent: str
    tasks: list[TaskResult]
    met: bool
    sandbox: str = "none"
    incomplete: bool = False  # stopped (SIGINT, SIGTERM) before every task's trials ran
    stopped: str | None = None  # what stopped it
