"""The subcommands of ``convmem``: the registry.

Each module has ``register(sub, common)``, which adds its parser(s) to the
subparsers ``sub`` (with ``parents=[common]``, the global options) and sets
``run`` — a function of the parsed arguments returning the exit code.  To add
a command, write such a module and list it here; document it in docs/cli.md
(a test checks).  Sources of ``convmem import`` have their own registry in
:mod:`server.commands.imports`.
"""

from __future__ import annotations

from . import backup, export, health, imports, log, reads, replay, serve, token, ui

COMMANDS = (serve, token, health, replay, reads, export, imports, backup, log, ui)
