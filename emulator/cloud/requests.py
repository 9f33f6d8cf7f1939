"""One request type per control-plane operation: the body of `POST {api_url}` decoded strictly before any rule
runs, so a wrongly typed field is a 400 that names it. Fields the client sends that no rule reads are ignored.

Integers that name a stored row (generations) lie in SQLite's range. The parts of a submission the platform keeps (a
database target with its project fingerprint, service mutations) are `hosted.records` types, which keep what the
client sent of their members.

Shapes follow the 0.7.21 client's management client (pixeltable/service/management_client.py and
pxtfs_protocol.py): `org` is optional everywhere (the credential's organization), `db` names a database.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

# The client's objects a submission carries, which the platform keeps (hosted.records).
from emulator.hosted.records import DatabaseTarget, ProjectFingerprint, ServiceMutation

HOME = "home"
# A generation: a counter kept in SQLite, so within its 64-bit signed integers.
Generation = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]


class Request(msgspec.Struct, kw_only=True):
    operation_type: str


class Empty(Request, kw_only=True):
    pass


class OrgScoped(Request, kw_only=True):
    org: str | None = None


class DbScoped(OrgScoped, kw_only=True):
    db: str


# --- organizations and keys ---------------------------------------------------------------------------------


class CreateOrg(Request, kw_only=True):
    org: str
    display_name: str | None = None


class CreateKey(Request, kw_only=True):
    name: str
    grants: list[str] = msgspec.field(default_factory=list)


class UpdateKey(Request, kw_only=True):
    name: str
    allow: list[str] = msgspec.field(default_factory=list)
    revoke: list[str] = msgspec.field(default_factory=list)


class KeyName(Request, kw_only=True):
    name: str


# --- secrets ------------------------------------------------------------------------------------------------


class SetSecret(OrgScoped, kw_only=True):
    db: str | None = None
    key: str
    value: str


class DeleteSecret(OrgScoped, kw_only=True):
    db: str | None = None
    key: str


class ListSecrets(OrgScoped, kw_only=True):
    db: str | None = None


# --- databases ----------------------------------------------------------------------------------------------


class ReceiptRef(msgspec.Struct):
    kind: str
    resource_id: str
    generation: Generation


class GetReceipts(OrgScoped, kw_only=True):
    receipts: list[ReceiptRef]


class GetLogs(DbScoped, kw_only=True):
    since_seconds: int | None = None
    limit: int | None = None
    service_name: str | None = None
    base_path: str | None = None
    include_health: bool | None = None


class Blob(msgspec.Struct):
    sha256: str
    size: int


class ServiceGeneration(msgspec.Struct):
    service_name: str | None = None
    base_path: str | None = None
    generation: Generation | None = None


class ExpectedGenerations(msgspec.Struct):
    database: Generation | None = None
    services: list[ServiceGeneration] | None = None


class PrepareUpdate(DbScoped, kw_only=True):
    database_target: DatabaseTarget | None = None
    blob: Blob | None = None
    service_mutations: list[ServiceMutation] | None = None


class SubmitUpdate(PrepareUpdate, kw_only=True):
    expected_generations: ExpectedGenerations


class Retry(DbScoped, kw_only=True):
    kind: str | None = None
    generation: Generation
    service_name: str | None = None
    base_path: str | None = None


# --- services -----------------------------------------------------------------------------------------------


class ListServices(OrgScoped, kw_only=True):
    db: str | None = None


class ServiceRef(OrgScoped, kw_only=True):
    db: str | None = None
    service_name: str
    base_path: str | None = None


class ReportServiceInstance(ServiceRef, kw_only=True):
    fingerprint: ProjectFingerprint | None = None  # the ProjectFingerprint the pod loaded


# --- the media store (pxtfs_protocol.py) --------------------------------------------------------------------


class BucketCredentialsRequest(Request, kw_only=True):
    org: str
    db: str
    bucket_name: str = HOME
    prefix: str | None = None


class PresignedUrlRequest(Request, kw_only=True):
    org: str
    db: str
    key: str
    bucket_name: str = HOME
    method: Literal["get", "put"] = "get"
    expiration: int = 3600


class PresignedUrlsRequest(Request, kw_only=True):
    org: str
    db: str
    keys: list[str]
    expires_in: int
    bucket_name: str = HOME
