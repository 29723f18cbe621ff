"""``convmem token``: the HTTP bearer token (created on first use, mode 0600)."""

from __future__ import annotations

import argparse

from ._common import check_usable, store_path


def register(sub, common: argparse.ArgumentParser) -> None:
    text = "print the HTTP bearer token of `convmem serve --http`, creating it on first use"
    p = sub.add_parser("token", parents=[common], help=text, description=text)
    p.add_argument("--token-file", default=None, help="read the token from this file instead")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..auth import resolve_token

    path = store_path(args)
    check_usable(path)
    print(resolve_token(path, args.token_file))
    return 0
