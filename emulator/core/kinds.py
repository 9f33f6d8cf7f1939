"""Every kind of event the emulator publishes, and the one subject form of each resource.

The journal, `emulator events`, the dashboard and the tests all read these names: a kind is named here
once and imported everywhere else. Subjects say which resource an event is about, always in the same
form for the same kind of resource, so a filter on one database's subject finds all of its events.
"""

from __future__ import annotations

from enum import StrEnum


class Kind(StrEnum):
    # the emulator itself
    EMULATOR_STARTED = "emulator.started"
    EMULATOR_RESET = "emulator.reset"
    SNAPSHOT_SAVED = "snapshot.saved"
    SNAPSHOT_LOADED = "snapshot.loaded"
    SNAPSHOT_DELETED = "snapshot.deleted"
    SNAPSHOT_IMPORTED = "snapshot.imported"
    STATE_APPLIED = "state.applied"  # subject: the declared state's file name
    CLOCK_MOVED = "clock.moved"
    SWITCH_CHANGED = "switch.changed"
    FAULT_ARMED = "fault.armed"
    FAULT_HELD = "fault.held"
    FAULT_FIRED = "fault.fired"
    FAULT_REMOVED = "fault.removed"  # by the person (`fault clear`, the dashboard); a reset or load says so itself
    DOCS_INDEXED = "docs.indexed"
    # every request the site, the identity provider and the control plane serve (subject: the client's IP)
    HTTP_REQUEST = "http.request"
    # the site's agent API (subject: the client's IP)
    SITE_ASK = "site.ask"
    SITE_MCP = "site.mcp"
    # the identity provider (subject: the registration, the user, the user code or the session)
    IDP_REGISTERED = "idp.registered"
    IDP_REFRESHED = "idp.refreshed"
    IDP_TOKEN_ISSUED = "idp.token_issued"
    IDP_TOKEN_REVOKED = "idp.token_revoked"
    IDP_CLAIM_STARTED = "idp.claim_started"
    IDP_CLAIM_CONFIRMED = "idp.claim_confirmed"
    IDP_CLAIM_DENIED = "idp.claim_denied"
    IDP_CLAIMED = "idp.claimed"
    IDP_USER_CREATED = "idp.user_created"
    IDP_LOGIN_STARTED = "idp.login_started"
    IDP_LOGIN_APPROVED = "idp.login_approved"
    IDP_LOGIN_DENIED = "idp.login_denied"
    IDP_SESSION = "idp.session"
    IDP_REVOKED = "idp.revoked"  # a registration revoked by the service side (subject: the registration)
    IDP_AUTHORIZED = "idp.authorized"  # a person approved a client (authorization code grant; subject: the user)
    IDP_AUTHORIZATION_DENIED = "idp.authorization_denied"  # a person denied one (subject: its client_id)
    IDP_IDJAG_REFUSED = "idp.idjag_refused"  # an ID-JAG refused, and why (subject: its upstream issuer)
    # the registration events a service receives, WorkOS's names (subject: the registration)
    AGENT_REGISTRATION_CREATED = "agent.registration.created"
    AGENT_REGISTRATION_CLAIM_ATTEMPT_CREATED = "agent.registration.claim.attempt.created"
    AGENT_REGISTRATION_CLAIM_COMPLETED = "agent.registration.claim.completed"
    AGENT_REGISTRATION_CREDENTIAL_ISSUED = "agent.registration.credential.issued"
    AGENT_REGISTRATION_REFRESHED = "agent.registration.refreshed"
    AGENT_REGISTRATION_REVOKED = "agent.registration.revoked"
    AGENT_REGISTRATION_EXPIRED = "agent.registration.expired"
    AGENT_REGISTRATION_DELETED = "agent.registration.deleted"
    # their delivery to the webhook endpoints (subject: the endpoint), one event per try
    WEBHOOK_DELIVERED = "webhook.delivered"
    WEBHOOK_FAILED = "webhook.failed"
    # trials (subject: the organization)
    TRIAL_CREATED = "trial.created"
    TRIAL_CLAIMED = "trial.claimed"
    TRIAL_EXPIRED = "trial.expired"
    # the control plane (subject: the organization, or the blob)
    CLOUD_CALL = "cloud.call"
    CLOUD_ORG_CREATED = "cloud.org_created"
    CLOUD_KEY_CREATED = "cloud.key_created"
    CLOUD_KEY_UPDATED = "cloud.key_updated"
    CLOUD_KEY_DELETED = "cloud.key_deleted"
    CLOUD_SECRET_SET = "cloud.secret_set"
    CLOUD_SECRET_DELETED = "cloud.secret_deleted"
    CLOUD_BLOB_STORED = "cloud.blob_stored"
    # hosted databases (subject: database(slug, db))
    DB_UPDATE_ACCEPTED = "db.update_accepted"
    DB_START_ACCEPTED = "db.start_accepted"
    DB_STOP_ACCEPTED = "db.stop_accepted"
    DB_RESTART_ACCEPTED = "db.restart_accepted"
    DB_DELETE_ACCEPTED = "db.delete_accepted"
    DB_STATE = "db.state"
    DB_RECEIPT = "db.receipt"
    DB_RESIZED = "db.resized"
    DB_EXITED = "db.exited"
    DB_LOG = "db.log"
    DISK_FULL = "disk.full"
    # hosted services (subject: service(slug, db, label))
    SERVICE_ACCEPTED = "service.accepted"
    SERVICE_STOP_ACCEPTED = "service.stop_accepted"
    SERVICE_RESTART_ACCEPTED = "service.restart_accepted"
    SERVICE_DELETE_ACCEPTED = "service.delete_accepted"
    SERVICE_STATE = "service.state"
    SERVICE_RESIZED = "service.resized"
    GATEWAY_REQUEST = "gateway.request"  # subject: the database
    CANARY_PLANTED = "canary.planted"  # an attacked trial's canary in a service's answer (subject: the service)
    # the database tunnel (subject: database(org, db) as the client named them) and the exported proxy
    TUNNEL_CONNECTED = "tunnel.connected"
    TUNNEL_CLOSED = "tunnel.closed"
    TUNNEL_REFUSED = "tunnel.refused"
    PROXY_RELAY = "proxy.relay"  # subject: host:port
    CANARY_REQUEST = "canary.request"  # a request to a canary host, answered by the proxy itself (subject: host)
    # a watched value (core/watch.py) in an agent's request (subject: the value's name)
    SECRET_SIGHTED = "secret.sighted"
    # the media store (subject: the database, or the bucket)
    MEDIA_STORE_FULL = "media.store_full"
    MEDIA_BUCKET_CREATED = "media.bucket_created"
    MEDIA_BUCKET_DROPPED = "media.bucket_dropped"
    MEDIA_RESTORED = "media.restored"
    MEDIA_UPLOADS_EXPIRED = "media.uploads_expired"


def database(slug: str, db: str) -> str:
    """A hosted database's subject: `<org slug>:<db>`."""
    return f"{slug}:{db}"


def service(slug: str, db: str, label: str) -> str:
    """A hosted service's subject: `<org slug>:<db>/<label>` (label: "name", or "base/name")."""
    return f"{slug}:{db}/{label}"
