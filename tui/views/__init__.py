"""The dashboard's views: one table per kind of thing the emulator holds, and the log."""
