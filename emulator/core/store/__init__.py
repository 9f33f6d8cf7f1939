from emulator.core.store.db import Db, Store, many, one, run

__all__ = ["Db", "Store", "many", "one", "run"]
