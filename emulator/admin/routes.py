"""Every `/_emulator` endpoint, grouped by resource: the emulator itself, identity, organizations, databases and
services. Each calls the same domain the public surfaces use."""

from emulator.admin import databases, emulator, identity, orgs, snapshots

HANDLERS = [*emulator.HANDLERS, *snapshots.HANDLERS, *identity.HANDLERS, *orgs.HANDLERS, *databases.HANDLERS]
