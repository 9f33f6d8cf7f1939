"""What the management API answers, one type per shape the client reads (pixeltable/service/management_protocol.py
of 0.7.21: `ApiKeyRecord`, `DatabaseReport`, `ServiceInstanceRecord`, and the answers that carry them).

Every field is sent, `null` included, as the product does; the domain's records become these here, at the edge.
A database's resources are the domain's `DatabaseResources`; a project fingerprint and a service mutation are the
domain's `ProjectFingerprint` and `ServiceMutation`, which keep what the client sent of their members. Each
operation's function in operations.py names its answer type as its return annotation (the OpenAPI document's
answer is read off them).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from emulator.core.clock import iso
from emulator.hosted.records import (
    ApiKey,
    Database,
    DatabaseResources,
    OpenObject,
    ProjectFingerprint,
    Receipt,
    Service,
    ServiceMutation,
    ServiceResources,
    sent,
)
from emulator.hosted.states import BuildOutcome, DbState, ServiceState


class Answer(msgspec.Struct, kw_only=True):
    """The base of every answer: encoded whole (no field left out), in the order declared."""


class OrgEntry(Answer):
    org_id: str
    org: str
    default_db: str | None
    created_at: float
    updated_at: float


class Orgs(Answer):
    orgs: list[OrgEntry]


class CreatedOrg(Answer):
    org_id: str
    org: str
    default_db: str
    created_at: str
    updated_at: str


class ApiKeyRecord(Answer):
    name: str
    key_type: str
    grants: list[str]
    created_at: str
    created_by: str
    api_key: str | None  # the secret, only in the answer that created it

    @classmethod
    def of(cls, key: ApiKey, secret: str | None = None) -> ApiKeyRecord:
        return cls(
            name=key.name,
            key_type=key.key_type,
            grants=key.grants,
            created_at=iso(key.created_at),
            created_by=key.created_by or "",
            api_key=secret,
        )


class KeyAnswer(Answer):
    key: ApiKeyRecord


class Keys(Answer):
    keys: list[ApiKeyRecord]


class KeyDeleted(Answer):
    name: str


class SecretRevision(Answer):
    key: str
    revision: int | None  # None: deleted


class SecretEntry(Answer):
    key: str
    db: str | None  # None: the organization's


class Secrets(Answer):
    org: str
    secrets: list[SecretEntry]


class DatabaseStatus(Answer):
    resources: DatabaseResources
    state: DbState
    last_build_outcome: BuildOutcome | None
    last_build_error: str | None
    failure_reason: str | None
    md_version: int | None


class DatabaseReport(Answer):
    db: str | None
    target_resources: DatabaseResources | None
    current: DatabaseStatus | None
    receipt: Receipt | None

    @classmethod
    def of(cls, row: Database) -> DatabaseReport:
        """A database's desired resources, what it runs with and its state, and its current generation's receipt."""
        current = row.current
        status = None
        if current is not None:
            status = DatabaseStatus(
                resources=current,
                state=row.state,
                last_build_outcome=row.last_build_outcome,
                last_build_error=row.last_build_error,
                failure_reason=row.failure_reason,
                md_version=current.pxt_md_version,
            )
        return cls(db=row.name, target_resources=row.target, current=status, receipt=row.receipt)

    @classmethod
    def new(cls, db: str) -> DatabaseReport:
        """A database the plan would create."""
        return cls(db=db, target_resources=None, current=None, receipt=None)


class WorkerStatus(Answer):
    pod_id: str
    status: Literal["Running", "Starting"]
    ready: int
    total: int
    restarts: int
    age_s: int


class DbAnswer(Answer):
    report: DatabaseReport
    worker_status: list[WorkerStatus]


class Reports(Answer):
    reports: list[DatabaseReport]


class Receipts(Answer):
    receipts: list[Receipt]


class ReceiptAnswer(Answer):
    receipt: Receipt


class Archive(Answer):
    presigned_url: str
    digest: str
    fingerprint: ProjectFingerprint


class LogRecord(Answer):
    ts_ms: int
    line: str


class Logs(Answer):
    records: list[LogRecord]


class UsageResource(Answer):
    label: str
    used: int
    limit: int | None
    unit: Literal["count", "bytes"]


class Meter(Answer):
    """A metered line of the product's usage (the emulator meters nothing, so sends none)."""

    label: str
    quantity: float
    unit: str
    usd: float | None


class Usage(Answer):
    plan: str
    period_start: str
    period_end: str
    resources: list[UsageResource]
    counts_from: None = None  # the emulator charges nothing: no meter, no money, no limit reached
    used_usd: float = 0.0
    included_usd: float = 0.0
    stops_at_limit: bool = True
    limit_reached_at: None = None
    meters: list[Meter] = msgspec.field(default_factory=list)  # empty: nothing is metered


class ServiceGenerationAnswer(Answer):
    """(Named apart from the request's ServiceGeneration: the OpenAPI document has one schema per name.)"""

    service_name: str
    base_path: str
    generation: int


class Generations(Answer):
    database: int
    services: list[ServiceGenerationAnswer]


class Upload(Answer):
    url: str
    headers: dict[str, str] = msgspec.field(default_factory=dict)


class PlanAnswer(Answer):
    generations: Generations
    report: DatabaseReport
    services: list[ServiceMutation]  # the current specs of the services the change names, as they were accepted
    upload: Upload | None  # where to put the archive, when the emulator does not hold it yet
    plan: None = None


class ServiceInstanceRecord(Answer):
    service_name: str
    base_path: str
    endpoint: str
    app_module: str
    spec: OpenObject | None  # the client's ServiceSpec, as its mutation sent it
    otel: bool
    state: ServiceState
    created_at: float
    updated_at: float
    error: str | None
    fingerprint: ProjectFingerprint | None  # the one its pod reported (report_service_instance)
    update_pending: bool
    resources: ServiceResources  # as its accepted spec holds them (filled in: plans.ServiceSize)
    description: str | None
    receipt: Receipt | None

    @classmethod
    def of(cls, row: Service, endpoint: str) -> ServiceInstanceRecord:
        desired = row.desired
        return cls(
            service_name=row.name,
            base_path=row.base_path,
            endpoint=endpoint,
            app_module=desired.app_module,
            spec=sent(desired.spec),
            otel=bool(desired.otel),
            state=row.state,
            created_at=row.created_at,
            updated_at=row.updated_at,
            error=row.error,
            fingerprint=row.fingerprint,
            update_pending=False,
            resources=desired.resources or ServiceResources(),
            description=sent(desired.description),
            receipt=row.receipt,
        )


class Instances(Answer):
    instances: list[ServiceInstanceRecord]


class ServiceAnswer(Answer):
    instance: ServiceInstanceRecord
    receipt: Receipt


class ServiceDeleted(Answer):
    service_name: str
    receipt: Receipt


class Nothing(Answer):
    """`{}`: the call was taken."""


class PixeltableAuth(msgspec.Struct):
    """`/.well-known/pixeltable-auth`: where `pxt login` signs in (the identity provider's device sign-in stub)."""

    client_id: str
    workos_api: str
