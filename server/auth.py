"""The bearer token of the HTTP server: where it comes from and how it is checked.

The token is, in order: the file named by ``--token-file``, else
``$CONVMEM_TOKEN``, else the file ``http-token`` beside the store (created on
first use with 32 random bytes as hexadecimal digits, mode 0600).  It is
compared in constant time (:func:`hmac.compare_digest`, by
:class:`server.bearer.BearerVerifier`, which also knows the named tokens) and
never logged.
"""

from __future__ import annotations

import os
import secrets

from eventstore.errors import ValidationError

TOKEN_FILE = "http-token"
ENV_VAR = "CONVMEM_TOKEN"
MIN_LENGTH = 16


def default_token_file(store: str) -> str:
    """The token file beside the store directory: ``<store>.http-token``."""
    return os.path.abspath(store).rstrip(os.sep) + "." + TOKEN_FILE


def ensure_token(path: str) -> str:
    """The token in ``path``; a new random one written there (0600) when the file does not exist."""
    try:
        return read_token(path)
    except FileNotFoundError:
        pass
    token = new_token()
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:          # another process created it first: use theirs
        return read_token(path)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
        f.flush()
        os.fsync(f.fileno())
    return token


def new_token() -> str:
    """32 random bytes as 64 hexadecimal digits: nothing a shell or an option parser reads
    specially (URL-safe base64 may begin with ``-``, which looks like an option)."""
    return secrets.token_hex(32)


def read_token(path: str) -> str:
    """The token held in ``path`` (surrounding whitespace removed); refuses a short or
    group/world-readable one."""
    with open(path, encoding="utf-8") as f:
        if os.fstat(f.fileno()).st_mode & 0o077:
            raise ValidationError("token file: must not be readable by group or others (chmod 600 it)")
        return checked(f.read().strip(), "token file")


def checked(token: str, source: str) -> str:
    if len(token) < MIN_LENGTH or not token.isascii() or not token.isprintable() or " " in token:
        raise ValidationError(f"{source}: the token must be at least {MIN_LENGTH} printable ASCII "
                              "characters without spaces")
    return token


def resolve_token(store: str, token_file: str | None) -> str:
    """The server's token: ``token_file``, else ``$CONVMEM_TOKEN``, else the store's own file."""
    if token_file:
        return read_token(token_file)
    env = os.environ.get(ENV_VAR)
    if env:
        return checked(env.strip(), ENV_VAR)
    return ensure_token(default_token_file(store))
