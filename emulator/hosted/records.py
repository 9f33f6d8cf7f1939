"""Typed records of the platform's tables, decoded once where a row is read (JSON columns included)."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from emulator.hosted.states import BuildOutcome, DbState, OrgState, Phase, ServiceState

Size = int | float  # a declared size, answered back as it was declared (1 stays 1, 1.0 stays 1.0)

# The client's objects the platform keeps and answers back (a project fingerprint, a service mutation) are typed
# with the members of the 0.7.21 client (pixeltable/utils/project.py, service/management_protocol.py). A member the
# client left out is UNSET and stays out, one it sent as null stays null, so what is answered back is what was
# sent; a member the emulator does not know is dropped. Parts the platform never reads (a project's config
# sections, a service's ServiceSpec) are open JSON objects, passed through.

T = TypeVar("T")


def sent(value: T | UnsetType) -> T | None:
    """A member of a client's object as it reads it: None when left out."""
    return None if value is UNSET else value


OpenObject = dict[str, Any]
"""A JSON object passed through unread (a ServiceSpec, a config section's keys): nothing here reads its members.
(Not `dict[str, object]`: msgspec's JSON Schema, which the OpenAPI document is made of, has no schema for `object`.)"""


class ProjectFingerprint(msgspec.Struct, kw_only=True):
    """The client's `ProjectFingerprint`: what the project's archive and environment digests are made of."""

    files: dict[str, str] | UnsetType = UNSET
    python_version: str | UnsetType | None = UNSET
    system_dependencies: list[str] | UnsetType | None = UNSET
    pixeltable_version: str | UnsetType | None = UNSET
    uv_options: str | UnsetType | None = UNSET
    installed_from_project: dict[str, str] | UnsetType | None = UNSET
    config: dict[str, OpenObject] | UnsetType | None = UNSET  # the project config's sections

    def __bool__(self) -> bool:
        """An empty object (`{}`) names no project, as null does."""
        return any(getattr(self, name) is not UNSET for name in self.__struct_fields__)


class DatabaseTarget(msgspec.Struct, kw_only=True):
    """A submission's `DatabaseTarget`: the declared size (None: as it is now) and the project to run."""

    cpu: Size | None = None
    memory_mb: Size | None = None
    workers: Size | None = None
    disk_gb: Size | None = None
    fingerprint: ProjectFingerprint | None = None
    pxt_md_version: int | None = None
    force_build_nonce: str | None = None  # `pxt db build-image` sends a fresh one


class ServiceResources(msgspec.Struct, kw_only=True):
    """A service's `ServiceResources`: as a mutation declares them (None: the platform chooses), and as an accepted
    one holds them (filled in: `plans.ServiceSize`)."""

    cpu: Size | None = None
    memory_mb: Size | None = None
    workers: Size | None = None
    file_cache_gb: Size | None = None


class ServiceMutation(msgspec.Struct, kw_only=True):
    """A submission's `ServiceMutation`, kept (base path, lifecycle and resources filled in) as the service's desired
    state and answered back by `prepare_update`."""

    service_name: str
    base_path: str | UnsetType | None = UNSET
    lifecycle: str | UnsetType = UNSET  # "running" when left out
    spec: OpenObject | UnsetType | None = UNSET  # the client's ServiceSpec, answered back as its instance's spec
    app_module: str
    otel: bool | UnsetType = UNSET
    resources: ServiceResources | UnsetType | None = UNSET
    description: str | UnsetType | None = UNSET
    pin: str | UnsetType | None = UNSET


class DatabaseResources(msgspec.Struct, kw_only=True):
    """A database's `DatabaseResources` (the client's name): its size, the project it runs and its metadata version.
    A database row's `target` (desired) and `current` (running) are each one."""

    cpu: Size
    memory_mb: Size
    workers: Size
    disk_gb: Size
    fingerprint: ProjectFingerprint | None  # None: no project yet
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
    desired: ServiceMutation  # the one last accepted (base path, lifecycle and resources filled in)
    state: ServiceState
    error: str | None = None
    fingerprint: ProjectFingerprint | None = None  # what its pod reported
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
