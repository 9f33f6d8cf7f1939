"""Typed records of the platform's tables, decoded once where a row is read (JSON columns included)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from emulator.hosted.states import BuildOutcome, DbState, OrgState, Phase, ServiceState

# What a declared state did to one row: made it, changed it, or found it as declared.

AsSent = dict[str, Any]
"""A JSON object kept as the client sent it (a database target, a project fingerprint, a service mutation): the
platform checks the members it reads (`cloud.requests`), and stores, hashes and answers back the whole object,
members it does not read included, so it stays open JSON."""

Size = int | float  # a declared size, answered back as it was declared (1 stays 1, 1.0 stays 1.0)


class DatabaseResources(msgspec.Struct, kw_only=True):
    """A database's `DatabaseResources` (the client's name): its size, the project it runs and its metadata version.
    A database row's `target` (desired) and `current` (running) are each one."""

    cpu: Size
    memory_mb: Size
    workers: Size
    disk_gb: Size
    fingerprint: AsSent | None  # the project's ProjectFingerprint (None: no project yet)
    pxt_md_version: int
    default_bucket: str | None
    # an update's (`pxt db build-image` sends one; null otherwise); UNSET: the database was never updated
    force_build_nonce: str | UnsetType | None = UNSET


class ReceiptError(msgspec.Struct):
    """Why a generation failed, as the client shows it; a retry is the person's call, never automatic here."""

    message: str
    retryable: bool = False
    attempts: int = 1
    dependency: bool = False


class Receipt(msgspec.Struct, kw_only=True):
    """A generation's `GenerationReceipt`, as the client reads it from `get_receipts` and reports."""

    kind: Literal["database", "service"]
    resource_id: str
    generation: int
    db: str
    service_name: str | None
    base_path: str
    attempt_id: str
    outcome: str | None = None
    error: ReceiptError | None = None
    phase: Phase
    waiting_for: str | None
    warnings: list[str] = msgspec.field(default_factory=list)


class Org(msgspec.Struct, kw_only=True):
    id: str
    slug: str
    display_name: str | None = None
    trial: bool
    state: OrgState
    registration_id: str | None = None
    network: str | None = None
    expires_at: float | None = None
    claimed_at: float | None = None
    created_at: float
    updated_at: float


class ApiKey(msgspec.Struct, kw_only=True):
    id: str
    org_id: str
    name: str
    key_type: str  # "user" | "runtime"
    grants: list[str]
    created_by: str | None = None
    created_at: float


class Database(msgspec.Struct, kw_only=True):
    org_id: str
    name: str
    id: str
    state: DbState
    generation: int
    target: DatabaseResources | None = None  # the desired resources (None: no update yet)
    current: DatabaseResources | None = None  # what it runs with
    receipt: Receipt | None = None  # the current generation's
    archive_sha256: str | None = None
    last_build_outcome: BuildOutcome | None = None
    last_build_error: str | None = None
    failure_reason: str | None = None
    env_digest: str | None = None
    started_at: float | None = None
    restarts: int = 0
    gateway_port: int | None = None
    created_at: float
    updated_at: float
    slug: str = ""  # the organization's, when read with it


class Service(msgspec.Struct, kw_only=True):
    id: str
    org_id: str
    db: str
    base_path: str
    name: str
    generation: int
    desired: AsSent  # the ServiceMutation last accepted (resources filled in)
    state: ServiceState
    error: str | None = None
    fingerprint: Any = None  # what its pod reported
    receipt: Receipt | None = None
    created_at: float
    updated_at: float
    slug: str = ""

    @property
    def label(self) -> str:
        return service_label(self.base_path, self.name)


class LogLine(msgspec.Struct, kw_only=True):
    id: int
    ts_ms: int
    service: str
    line: str


def service_label(base: str, name: str) -> str:
    """How logs, events and the gateway name a service: "name", or "base/name" under a base path."""
    return f"{base}/{name}".lstrip("/")
