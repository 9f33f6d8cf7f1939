"""Every `/_emulator` endpoint, grouped by resource: the emulator itself, identity, organizations, databases and
services. Each calls the same domain the public surfaces use."""

from emulator.admin import (
    agents,
    behaviour,
    databases,
    declared,
    emulator,
    faults,
    identity,
    orgs,
    snapshots,
    watch,
    webhooks,
)

HANDLERS = [
    *emulator.HANDLERS,
    *faults.HANDLERS,
    *snapshots.HANDLERS,
    *declared.HANDLERS,
    *behaviour.HANDLERS,
    *identity.HANDLERS,
    *agents.HANDLERS,
    *orgs.HANDLERS,
    *databases.HANDLERS,
    *watch.HANDLERS,
    *webhooks.HANDLERS,
]
