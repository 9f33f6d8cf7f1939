"""What an evaluation reports: a trial's result (its checks, cost, timeline and what the agent printed), a task's
(its trials, reliability figures with their intervals, and summed cost) and a suite's. `emulator eval --json`
prints these; the text, JUnit and HTML reports are made from them."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from emulator.eval import scoring
from emulator.eval.canaries import CanaryHit
from emulator.eval.checks import CheckResult
from emulator.eval.cost import AgentUsage, Cost, CostSum, summed
from emulator.eval.scoring import Interval


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
    transcript: str = ""  # all the agent printed, up to TRANSCRIPT_CAP bytes (what was cut is said where it was)
    usage: AgentUsage | None = None  # what the agent reported of its model use (its usage file), None: nothing
    usage_note: str | None = None  # why its usage file was not used; never a change of verdict


def _unknown() -> Interval:
    return Interval(low=0.0, high=1.0)


class TaskResult(msgspec.Struct, kw_only=True):
    """A task's trials and what they add up to. The figures (pass@1, pass@k, pass^k over every trial, clean and
    attacked: an attacked trial that followed a canary failed), their 95% intervals (scoring.py says what they
    assume) and `cost` are derived from `trials` and `k` when the result is made or decoded: whatever a caller
    gives for them is replaced, so they cannot disagree with the trials."""

    task: str
    path: str
    k: int
    threshold: float
    met: bool
    trials: list[TrialResult]
    pass_at_1: float = 0.0
    pass_at_1_ci: Interval = msgspec.field(default_factory=_unknown)
    pass_at_k: float = 0.0
    pass_at_k_ci: Interval = msgspec.field(default_factory=_unknown)
    pass_hat_k: float = 0.0
    pass_hat_k_ci: Interval = msgspec.field(default_factory=_unknown)
    confidence: float = scoring.CONFIDENCE
    cost: CostSum = msgspec.field(default_factory=CostSum)  # the trials' measured cost and reported usage, summed
    # With canaries, as AgentDojo reports them: the checks' pass rate of the clean trials and of the attacked ones,
    # and the share of attacked trials that followed a canary.
    utility: float | None = None
    utility_under_attack: float | None = None
    attack_success_rate: float | None = None
    incomplete: bool = False  # the run stopped before all its trials ran: the figures are of those that did

    def __post_init__(self) -> None:
        n, passed = len(self.trials), sum(t.passed for t in self.trials)
        self.cost = summed((t.cost, t.usage) for t in self.trials)
        self.pass_at_1 = scoring.pass_at_1(n, passed)
        if not 0 < self.k <= n:  # no trial ran (k is at least 1): nothing is known
            self.pass_at_k = self.pass_hat_k = 0.0
            self.pass_at_1_ci, self.pass_at_k_ci, self.pass_hat_k_ci = _unknown(), _unknown(), _unknown()
            return
        self.pass_at_k = scoring.pass_at_k(n, passed, self.k)
        self.pass_hat_k = scoring.pass_hat_k(n, passed, self.k)
        self.pass_at_1_ci = scoring.pass_at_1_interval(n, passed)
        self.pass_at_k_ci = scoring.pass_at_k_interval(n, passed, self.k)
        self.pass_hat_k_ci = scoring.pass_hat_k_interval(n, passed, self.k)


class SuiteResult(msgspec.Struct, kw_only=True):
    agent: str
    tasks: list[TaskResult]
    met: bool
    sandbox: str = "none"
    incomplete: bool = False  # stopped (SIGINT, SIGTERM) before every task's trials ran
    stopped: str | None = None  # what stopped it
    cost: CostSum = msgspec.field(default_factory=CostSum)  # every task's trials summed (derived, as a task's)

    def __post_init__(self) -> None:
        self.cost = summed((t.cost, t.usage) for task in self.tasks for t in task.trials)


TRANSCRIPT_CAP = 256 * 1024  # bytes of a trial's output kept in its result: the first three quarters, the last one


def transcript(log_path: Path) -> str:
    """What the agent printed (its output file, stdout and stderr as written), whole up to TRANSCRIPT_CAP bytes;
    past it the start and the end, with a line where the middle was cut that says how much. Not there: ""."""
    try:
        with open(log_path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size <= TRANSCRIPT_CAP:
                return f.read(TRANSCRIPT_CAP).decode(errors="replace")
            head = TRANSCRIPT_CAP * 3 // 4
            first = f.read(head)
            f.seek(size - (TRANSCRIPT_CAP - head))
            last = f.read()
    except OSError:
        return ""
    kept = len(first) + len(last)
    cut = f"\n[… {size - kept} bytes of the agent's output cut here: {kept} of {size} kept …]\n"
    return first.decode(errors="replace") + cut + last.decode(errors="replace")
