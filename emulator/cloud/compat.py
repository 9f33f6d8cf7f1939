"""Clients older than the emulator supports, told so before their requests are decoded.

The client sends no version on any origin (its `User-Agent` is `python-requests/…`), so an old client is told by what
only old clients send to the control plane, the one origin where their requests differ from a supported client's:
operations that pixeltable 0.7.18 replaced (database and service changes became `prepare_update`/`submit_update`,
`list_secrets` became `list_all_secrets`), and the 0.6 media-store fields (`org_slug`, `db_slug`). Their sign-in,
`pxt new` and other requests are the same as a supported client's, and are served. Without this, such a request got
`unknown operation_type` or a field-validation error that did not say why.
"""

from __future__ import annotations

from emulator.core.errors import CLIENT_TOO_OLD

# The oldest client whose management protocol is the emulator's (pixeltable/service/management_protocol.py is the same
# from 0.7.18 to 0.7.21, the version the emulator is tested with).
MIN_CLIENT = "0.7.18"
TESTED_CLIENT = "0.7.21"

# operation_type → what MIN_CLIENT sends instead
RETIRED_OPERATIONS = {
    "update_db": "prepare_update and submit_update",
    "create_service": "submit_update",
    "update_service": "submit_update",
    "start_service": "submit_update",
    "get_service": "list_services",
    "list_secrets": "list_all_secrets",
}
# fields of a current operation that only older clients send → the field that replaced them
RETIRED_FIELDS = {"org_slug": "org", "db_slug": "db"}


def _version_sent(body: dict[str, object]) -> str | None:
    """The client's version where a request carries it: a project fingerprint's `pixeltable_version` (database and
    service changes send one, at the top or in their target)."""
    for holder in (body, *(v for v in body.values() if isinstance(v, dict))):
        fingerprint = holder.get("fingerprint")
        if isinstance(fingerprint, dict):
            version = fingerprint.get("pixeltable_version")
            if isinstance(version, str) and version:
                return version
    return None


def refuse_old_client(body: dict[str, object]) -> None:
    """Raise a 400 that names the client as too old and says what to install, when `body` (a JSON object not yet
    decoded by its operation's type) is an old client's."""
    op = body.get("operation_type")
    if isinstance(op, str) and op in RETIRED_OPERATIONS:
        why = f"it sent {op}, which pixeltable >= {MIN_CLIENT} does not send (it sends {RETIRED_OPERATIONS[op]})"
    elif old := sorted(RETIRED_FIELDS.keys() & body.keys()):
        why = f"its {op} sent {', '.join(old)} (now {', '.join(RETIRED_FIELDS[f] for f in old)})"
    else:
        return
    version = _version_sent(body)
    client = f"pixeltable {version}" if version else f"pixeltable older than {MIN_CLIENT}"
    raise CLIENT_TOO_OLD(
        f"this client ({client}) is older than the emulator supports: {why}. "
        f"Upgrade to pixeltable >= {MIN_CLIENT}: pip install -U 'pixeltable>={MIN_CLIENT}'",
    )
