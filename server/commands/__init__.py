"""The subcommands of ``convmem``: the registry.

Each module has ``register(sub, common)``, which adds its parser(s) to the
subparsers ``sub`` (with ``parents=[common]``, the global options) and sets
``run`` — a function of the parsed arguments returning the exit code.  To add
a command, write such a module and list it here.
"""

from __future__ import annotations

from . import health, reads, replay, serve

COMMANDS = (serve, health, replay, reads)
