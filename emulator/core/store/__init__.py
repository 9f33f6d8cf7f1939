from typing import Literal

from emulator.core.store.db import Db, Store, many, one, run
from emulator.core.store.records import fetch_all, fetch_one, record

# What a declaration did to one record (the declared state's apply, a key's or a webhook's upsert).
Outcome = Literal["created", "updated", "unchanged"]

__all__ = ["Db", "Outcome", "Store", "fetch_all", "fetch_one", "many", "one", "record", "run"]
