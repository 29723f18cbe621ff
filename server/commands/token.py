"""``convmem token``: the HTTP bearer token (created on first use, mode 0600), and named tokens.

``convmem token`` prints the single token (principal ``default``, full access);
``token add NAME [--read-only] [--sessions PATTERN…]`` makes a named one and
prints it once; ``token list`` shows the named ones (never a secret);
``token revoke NAME`` removes one — a running server refuses it at its next
request (docs/http.md §Principals and scopes).
"""

from __future__ import annotations

import argparse
import json
import sys

from .._terminal import json_visible
from ._common import CommandError, check_usable, store_path


def register(sub, common: argparse.ArgumentParser) -> None:
    text = "print the HTTP bearer token of `convmem serve --http` (creating it on first use), or manage named tokens"
    p = sub.add_parser("token", parents=[common], help=text, description=text)
    p.add_argument("--token-file", default=None, help="read the token from this file instead")
    p.set_defaults(run=run)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    add = actions.add_parser("add", parents=[common], help="make a named token and print it (shown once)",
                             description="make a named token for `serve --http` and print it (shown once)")
    add.add_argument("name", metavar="NAME", help="the principal's name (1-64 of A-Z a-z 0-9 . _ -)")
    add.add_argument("--read-only", action="store_true", help="no write, update, delete or rebuild")
    add.add_argument("--sessions", nargs="+", default=[], metavar="PATTERN",
                     help="see and touch only sessions matching these patterns (* ? [..] as in the shell)")
    add.set_defaults(run=run_add)
    lst = actions.add_parser("list", parents=[common], help="list the named tokens (never a secret)",
                             description="list the named tokens: name, access, session patterns, creation time")
    lst.add_argument("--json", action="store_true", help="JSON instead of a table")
    lst.set_defaults(run=run_list)
    rev = actions.add_parser("revoke", parents=[common], help="remove a named token",
                             description="remove a named token; a running server refuses it at its next request")
    rev.add_argument("name", metavar="NAME")
    rev.set_defaults(run=run_revoke)


def run(args: argparse.Namespace) -> int:
    path = store_path(args)
    check_usable(path)
    print(token(path, args.token_file))
    return 0


def token(store: str, token_file: str | None) -> str:
    """The server's token (:func:`server.auth.resolve_token`); a file that cannot be read
    or created is a :class:`CommandError` naming it."""
    from ..auth import resolve_token
    try:
        return resolve_token(store, token_file)
    except OSError as exc:
        where = exc.filename or token_file or store
        raise CommandError(f"cannot read or create the token file {where}: {exc.strerror or exc}") from None


def _file(args: argparse.Namespace) -> str:
    from ..tokens import default_path
    path = store_path(args)
    check_usable(path)
    return default_path(path)


def _checked(action):
    from eventstore.errors import ConvMemError
    try:
        return action()
    except ConvMemError as exc:
        raise CommandError(exc.message) from None


def run_add(args: argparse.Namespace) -> int:
    from .. import tokens
    path = _file(args)
    print(_checked(lambda: tokens.add(path, args.name, args.read_only, tuple(args.sessions))))
    return 0


def run_list(args: argparse.Namespace) -> int:
    from .. import tokens
    path = _file(args)
    listed = [e.public() for e in _checked(lambda: tokens.read(path))]
    if args.json or not sys.stdout.isatty():
        print(json_visible(json.dumps(listed, ensure_ascii=False)))
        return 0
    from ._out import Out, local_time
    Out().table(["NAME", "ACCESS", "SESSIONS", "CREATED"],
                [[e["name"], "read-only" if e["read_only"] else "read-write", " ".join(e["sessions"]) or "(all)",
                  local_time(e["created_at"])] for e in listed])
    return 0


def run_revoke(args: argparse.Namespace) -> int:
    from .. import tokens
    path = _file(args)
    _checked(lambda: tokens.revoke(path, args.name))
    print(f"revoked {args.name}", file=sys.stderr)
    return 0
