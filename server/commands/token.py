"""``convmem token``: the HTTP bearer token (created on first use, mode 0600)."""

from __future__ import annotations

import argparse

from ._common import CommandError, check_usable, store_path


def register(sub, common: argparse.ArgumentParser) -> None:
    text = "print the HTTP bearer token of `convmem serve --http`, creating it on first use"
    p = sub.add_parser("token", parents=[common], help=text, description=text)
    p.add_argument("--token-file", default=None, help="read the token from this file instead")
    p.set_defaults(run=run)


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
