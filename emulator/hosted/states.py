"""The states of organizations, `pxt login` sign-ins, hosted databases and services, and the phases of their
receipts: what each may become.

The values are the product's own words (the client prints them), stored as they are in SQLite and on the wire;
`StrEnum` keeps them strings there. Every state a write sets is checked against `DB_MAY_FOLLOW` or
`SERVICE_MAY_FOLLOW` in the same statement that writes it (`databases.update`, `services.settle`), so a job that
would move a resource the wrong way fails loudly instead of leaving a state the rules never allowed.
"""

from __future__ import annotations

from enum import StrEnum


class OrgState(StrEnum):
    UNCLAIMED = "unclaimed"  # a trial no person has claimed yet: it lapses at its expires_at
    CLAIMED = "claimed"  # a trial a person claimed: it stays
    ACTIVE = "active"  # not a trial


class MemberRole(StrEnum):
    ADMIN = "admin"
    MEMBER = "member"


class LoginState(StrEnum):
    """`device_logins.state`: a `pxt login` sign-in (hosted/logins.py). Its session's state is derived where the
    operator's view of people reads it (identity/states.SessionState)."""

    PENDING = "pending"  # shown to the person, not yet decided
    APPROVED = "approved"  # the client's next poll gets its session
    DENIED = "denied"
    REDEEMED = "redeemed"  # the client got its session: the device code works once


class DbState(StrEnum):
    PROVISIONING = "PROVISIONING"  # created by `pxt new`/an org without resources: waiting for its first update
    AVAILABLE = "AVAILABLE"
    UPDATING = "UPDATING"
    STARTING = "STARTING"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    FAILED = "FAILED"
    DELETED = "DELETED"  # only in events and receipts: the row is gone


class ServiceState(StrEnum):
    DEPLOYING = "DEPLOYING"
    AVAILABLE = "AVAILABLE"
    UPDATING = "UPDATING"
    STARTING = "STARTING"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    FAILED = "FAILED"
    DELETED = "DELETED"


class Phase(StrEnum):
    """A receipt's phase: pending while its job runs, then how the generation ended."""

    PENDING = "PENDING"
    DELETING = "DELETING"
    READY = "READY"
    STOPPED = "STOPPED"
    DELETED = "DELETED"
    FAILED = "FAILED"


class BuildOutcome(StrEnum):
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


OBSERVED = "OBSERVED"  # a settled receipt's outcome: the emulator saw the resource reach its phase

DB_SETTLING = frozenset({DbState.UPDATING, DbState.PROVISIONING, DbState.STARTING, DbState.STOPPING})
"""A job is moving the database: verbs other than delete wait (409)."""
SERVICE_SETTLING = frozenset(
    {ServiceState.DEPLOYING, ServiceState.UPDATING, ServiceState.STARTING, ServiceState.STOPPING}
)
ACCEPTS_UPDATE = frozenset({DbState.AVAILABLE, DbState.PROVISIONING})
"""Where `db update` is accepted."""

_EVERY_DB = frozenset(DbState)
DB_MAY_FOLLOW: dict[DbState, frozenset[DbState]] = {
    # state → the states it may be entered from (staying in a state is always allowed)
    DbState.PROVISIONING: frozenset(),
    DbState.UPDATING: frozenset({DbState.AVAILABLE, DbState.FAILED}),  # an update; a retry of a failed one
    DbState.STARTING: frozenset({DbState.STOPPED, DbState.AVAILABLE, DbState.FAILED}),  # start; restart
    DbState.STOPPING: _EVERY_DB - {DbState.DELETED},  # stop; delete, which may interrupt any job
    # a job that ends; a failed stop or delete whose server still runs
    DbState.AVAILABLE: _EVERY_DB - {DbState.STOPPED, DbState.DELETED},
    DbState.FAILED: _EVERY_DB - {DbState.DELETED, DbState.STOPPED},
    DbState.STOPPED: frozenset({DbState.STOPPING}),
    DbState.DELETED: frozenset({DbState.STOPPING}),
}
_EVERY_SERVICE = frozenset(ServiceState)
SERVICE_MAY_FOLLOW: dict[ServiceState, frozenset[ServiceState]] = {
    ServiceState.DEPLOYING: frozenset(),
    ServiceState.UPDATING: _EVERY_SERVICE - {ServiceState.DELETED},  # a new mutation, whatever it ran as
    ServiceState.STARTING: frozenset({ServiceState.STOPPED, ServiceState.AVAILABLE, ServiceState.FAILED}),
    ServiceState.STOPPING: _EVERY_SERVICE - {ServiceState.DELETED},
    ServiceState.AVAILABLE: _EVERY_SERVICE - {ServiceState.STOPPED, ServiceState.DELETED},
    ServiceState.FAILED: _EVERY_SERVICE - {ServiceState.DELETED, ServiceState.STOPPED},
    ServiceState.STOPPED: frozenset({ServiceState.STOPPING}),
    ServiceState.DELETED: frozenset({ServiceState.STOPPING}),
}


class IllegalTransition(RuntimeError):
    """A write would move a resource to a state its current one may not become: a defect in a job, not input."""


def sources(new: DbState | ServiceState) -> list[str]:
    """The states a write to `new` may find the row in (itself included)."""
    table: dict[DbState, frozenset[DbState]] | dict[ServiceState, frozenset[ServiceState]]
    table = DB_MAY_FOLLOW if isinstance(new, DbState) else SERVICE_MAY_FOLLOW
    return sorted({new.value, *(s.value for s in table[new])})  # type: ignore[index]
