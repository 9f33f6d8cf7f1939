from emulator.core.store.db import Store

__all__ = ["Store"]
