"""Where the operator API lives on the site: the one prefix of every `/_emulator` path.

Core reads it (the boundary's token and body rules, the fault gate that never faults it, the journal that never
records it); admin/ops.py writes every operation's path under it. Core imports nothing of admin/, so it is here.
"""

ADMIN_PREFIX = "/_emulator"
