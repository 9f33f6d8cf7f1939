"""`/_emulator`: the emulator's own API, grouped by resource (routes.py gathers them), its wire types (wire.py)
and the one client the CLI and the dashboard use (client.py)."""
