"""Subcommands of `emulator` that live in modules of their own. Each module has `register(sub)`, which adds its
parsers to the `emulator` parser's subparsers and returns {command name: handler}."""
