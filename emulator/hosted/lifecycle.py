"""The one lifecycle rule of databases and services: which verb is allowed in which state, the state it moves
to, the receipt it gets, and retrying a failed generation.

Every accepted verb is a new generation of the resource with a receipt (PENDING, or DELETING for a delete),
accepted in one transaction with the checks that allowed it, then handed to the reconciler, which settles
the receipt. A verb on a resource whose job is still settling is 409 (wait for it); a verb that makes no
sense in the resource's state is 400 with what to do instead; a generation that is not the current one is
409 (plan again).
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from emulator.core import kinds
from emulator.core.context import Core
from emulator.core.errors import BAD_REQUEST, CONFLICT, NOT_FOUND
from emulator.core.payloads import DB_ACCEPTED, SERVICE_ACCEPTED
from emulator.hosted import databases, plans, receipts, services
from emulator.hosted.databases import DbChange
from emulator.hosted.reconciler import Reconciler
from emulator.hosted.records import Receipt, Service, service_label
from emulator.hosted.states import DB_SETTLING, SERVICE_SETTLING, DbState, Phase, ServiceState


@dataclass(frozen=True)
class Verb:
    state: DbState  # the state while its job runs (a service's has the same name: `service_state`)
    waiting_for: dict[str, str]  # per resource kind: what the receipt says it waits for

    @property
    def service_state(self) -> ServiceState:
        return ServiceState(self.state.value)


VERBS = {
    "start": Verb(DbState.STARTING, {"database": "start"}),
    "stop": Verb(DbState.STOPPING, {"database": "stop", "service": "stop"}),
    "restart": Verb(DbState.STARTING, {"database": "start", "service": "restart"}),
    "delete": Verb(DbState.STOPPING, {"database": "deletion", "service": "delete"}),
}


def check(kind: str, what: str, state: DbState | ServiceState, verb: str) -> None:
    """Whether `verb` may act on a resource (`what`: "database main", "service ingest") in `state`."""
    settling = DB_SETTLING if kind == "database" else SERVICE_SETTLING
    if state in settling and verb != "delete":
        raise CONFLICT(f"{what} is {state}; wait for it to settle")
    if verb == "start" and state != "STOPPED":
        raise BAD_REQUEST(f"{what} is {state}, not STOPPED")
    if verb == "stop" and state == "STOPPED":
        start = "pxt db start" if kind == "database" else "pxt service restart"
        raise BAD_REQUEST(f"{what} is STOPPED; start it with {start}")
    if verb == "restart" and state == "STOPPED" and kind == "database":
        raise BAD_REQUEST(f"{what} is STOPPED; start it with pxt db start")


def next_receipt(
    core: Core,
    kind: receipts.Kind,
    verb: str,
    resource_id: str,
    generation: int,
    db: str,
    service_name: str | None = None,
    base_path: str = "",
) -> Receipt:
    """The receipt of a verb's new generation: PENDING (DELETING for a delete), waiting for what the verb does."""
    return receipts.new(
        kind,
        resource_id,
        generation,
        db,
        phase=Phase.DELETING if verb == "delete" else Phase.PENDING,
        waiting_for=VERBS[verb].waiting_for[kind],
        attempt=core.ids.ident("att_"),
        service_name=service_name,
        base_path=base_path,
    )


def check_retry(what: str, receipt: Receipt | None, generation: int) -> Receipt:
    if receipt is None or receipt.generation != generation:
        raise CONFLICT(f"generation {generation} is not the current one of {what}; plan again")
    if receipt.phase != Phase.FAILED:
        raise BAD_REQUEST(f"generation {receipt.generation} of {what} has not failed")
    return receipt


# --- databases ----------------------------------------------------------------------------------------------


async def database_verb(core: Core, reconciler: Reconciler, org_id: str, slug: str, db: str, verb: str) -> Receipt:
    rule = VERBS[verb]
    if verb == "delete" and db == plans.DEFAULT_DB:
        raise BAD_REQUEST(f"the database {plans.DEFAULT_DB} cannot be deleted")
    now = core.clock.now()
    async with core.store.transaction() as conn:
        row = await databases.require(conn, org_id, slug, db)
        check("database", f"database {db}", row.state, verb)
        receipt = next_receipt(core, "database", verb, row.id, row.generation + 1, db)
        await databases.accept(conn, row, receipt, now, state=rule.state)
    core.bus.publish(kinds.database(slug, db), DB_ACCEPTED[verb](generation=receipt.generation, state=rule.state))
    reconciler.schedule(org_id, slug, db, receipt.generation, verb)
    return receipt


async def retry_database(
    core: Core, reconciler: Reconciler, org_id: str, slug: str, db: str, generation: int
) -> Receipt:
    async with core.store.transaction() as conn:
        row = await databases.require(conn, org_id, slug, db)
        failed = check_retry(db, row.receipt, generation)
        receipt = msgspec.structs.replace(
            failed, phase=Phase.PENDING, error=None, waiting_for="environment", attempt_id=core.ids.ident("att_")
        )
        await databases.settle(conn, row, receipt, core.clock.now(), DbChange(state=DbState.UPDATING))
    reconciler.schedule(org_id, slug, db, generation, "update")
    return receipt


# --- services -----------------------------------------------------------------------------------------------


async def require_service(core: Core, org_id: str, slug: str, db: str, base: str, name: str) -> Service:
    row = await services.get(core.store, org_id, db, base, name)
    if row is None:
        raise NOT_FOUND(f"no service {name} in {slug}:{db}")
    return row


async def service_verb(
    core: Core, reconciler: Reconciler, org_id: str, slug: str, db: str, base: str, name: str, verb: str
) -> tuple[Service | None, Receipt]:
    """(the service after the verb was accepted, or None once deleted; the new generation's receipt)."""
    rule = VERBS[verb]
    now = core.clock.now()
    async with core.store.transaction() as conn:
        row = await services.get(conn, org_id, db, base, name)
        if row is None:
            raise NOT_FOUND(f"no service {name} in {slug}:{db}")
        check("service", f"service {name}", row.state, verb)
        receipt = next_receipt(
            core, "service", verb, row.id, row.generation + 1, db, service_name=row.name, base_path=row.base_path
        )
        await services.accept(conn, row, receipt, now, state=rule.service_state)
        fresh = await services.get(conn, org_id, db, base, name)
    core.bus.publish(
        kinds.service(slug, db, service_label(base, name)), SERVICE_ACCEPTED[verb](generation=receipt.generation)
    )
    reconciler.schedule_service(org_id, slug, db, base, name, receipt.generation, verb)
    return (None if verb == "delete" else fresh), receipt


async def retry_service(
    core: Core, reconciler: Reconciler, org_id: str, slug: str, db: str, base: str, name: str, generation: int
) -> Receipt:
    row = await require_service(core, org_id, slug, db, base, name)
    receipt = check_retry(name, row.receipt, generation)
    reconciler.schedule_service(org_id, slug, db, base, name, receipt.generation, "deploy")
    return receipt
