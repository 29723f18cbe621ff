"""Named tokens: ``convmem token add/list/revoke`` and their file.

The file ``<store>.tokens`` (beside the store directory, like the single
token's ``<store>.http-token``; mode 0600) is one JSON object::

    {"version": 1, "tokens": [{"name": "agent-a", "id": "3f9c0a1b2c4d", "salt": "…",
      "hash": "…", "read_only": false, "sessions": ["proj-a/*"], "created_at": 1764…}]}

A token is ``cmt_<id>_<secret>``: ``id`` (12 hex digits) finds its entry without
trying every one; only ``sha256(salt ‖ secret)`` is kept, compared in constant
time (:func:`hmac.compare_digest`).  The secret is 32 random bytes, so one hash
suffices (no key stretching: nothing to guess).  A token starts with ``cmt_``,
never with ``-`` (safe as a command-line argument).

:class:`TokenFile` is what a running server holds: it re-reads the file when
its ``stat`` changes (inode, size or mtime), so a token added, revoked or
changed takes effect at the next request, without a restart.  Writers replace
the file atomically (write a temporary file, fsync, rename).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import threading
import time
from dataclasses import dataclass

from eventstore import files
from eventstore.errors import ConvMemError, NotFoundError, ValidationError

from .principals import Principal, check_name, check_patterns

log = logging.getLogger("convmem")

SUFFIX = ".tokens"
PREFIX = "cmt_"
VERSION = 1


def default_path(store: str) -> str:
    """The tokens file beside the store directory: ``<store>.tokens``."""
    return os.path.abspath(store).rstrip(os.sep) + SUFFIX


@dataclass(frozen=True)
class Entry:
    name: str
    token_id: str
    salt: bytes
    digest: bytes
    read_only: bool
    sessions: tuple[str, ...]
    created_at: int

    @property
    def principal(self) -> Principal:
        return Principal(self.name, self.read_only, self.sessions)

    def public(self) -> dict:
        """What ``token list`` shows: never the salt or the hash."""
        return {"name": self.name, "read_only": self.read_only, "sessions": list(self.sessions),
                "created_at": self.created_at}

    def to_json(self) -> dict:
        return {"name": self.name, "id": self.token_id, "salt": self.salt.hex(), "hash": self.digest.hex(),
                "read_only": self.read_only, "sessions": list(self.sessions), "created_at": self.created_at}


def _digest(salt: bytes, secret: str) -> bytes:
    return hashlib.sha256(salt + secret.encode("utf-8", "surrogatepass")).digest()


def _entry(obj: object) -> Entry:
    if not isinstance(obj, dict):
        raise ValidationError("tokens file: an entry is not an object")
    try:
        return Entry(str(obj["name"]), str(obj["id"]), bytes.fromhex(obj["salt"]), bytes.fromhex(obj["hash"]),
                     bool(obj.get("read_only", False)), tuple(str(p) for p in obj.get("sessions", ())),
                     int(obj.get("created_at", 0)))
    except (KeyError, TypeError, ValueError):
        raise ValidationError("tokens file: an entry lacks name, id, salt or hash") from None


def read(path: str) -> list[Entry]:
    """The entries of the tokens file (none when it does not exist); refuses one readable by others."""
    try:
        with open(path, encoding="utf-8") as f:
            if os.fstat(f.fileno()).st_mode & 0o077:
                raise ValidationError("tokens file: must not be readable by group or others (chmod 600 it)")
            data = json.load(f)
    except FileNotFoundError:
        return []
    except ValueError:
        raise ValidationError("tokens file: is not JSON") from None
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("tokens"), list):
        raise ValidationError(f"tokens file: must be an object with version {VERSION} and a tokens list")
    return [_entry(e) for e in data["tokens"]]


def _write(path: str, entries: list[Entry]) -> None:
    text = json.dumps({"version": VERSION, "tokens": [e.to_json() for e in entries]}, indent=1) + "\n"
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    with files.private_replacement(path, f"{path}.{os.getpid()}.tmp") as f:
        f.write(text)


def add(path: str, name: str, read_only: bool = False, sessions: tuple[str, ...] = ()) -> str:
    """A new token for ``name`` (its secret is shown once, here); refuses a name in use."""
    name, sessions = check_name(name), check_patterns(sessions)
    entries = read(path)
    if any(e.name == name for e in entries):
        raise ValidationError("NAME: a token with this name exists (revoke it first)")
    token_id, secret, salt = secrets.token_hex(6), secrets.token_urlsafe(32), secrets.token_bytes(16)
    entries.append(Entry(name, token_id, salt, _digest(salt, secret), read_only, sessions,
                         int(time.time() * 1000)))
    _write(path, entries)
    return f"{PREFIX}{token_id}_{secret}"


def revoke(path: str, name: str) -> None:
    entries = read(path)
    kept = [e for e in entries if e.name != name]
    if len(kept) == len(entries):
        raise NotFoundError("NAME: no token has this name")
    _write(path, kept)


def split(token: str) -> tuple[str, str] | None:
    """``(id, secret)`` of a named token's text; None for any other text."""
    if not token.startswith(PREFIX):
        return None
    token_id, sep, secret = token[len(PREFIX):].partition("_")
    return (token_id, secret) if sep and token_id and secret else None


class TokenFile:
    """The named tokens as a running server sees them: re-read when the file changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int, int] | None = None
        self._by_id: dict[str, tuple[Entry, Principal]] = {}

    def _fresh(self) -> dict[str, tuple[Entry, Principal]]:
        """The tokens as the file holds them now.  A damaged file (or one others
        may read) refuses every named token, logged once, until it changes."""
        try:
            st = os.stat(self.path)
            stamp: tuple[int, int, int, int] | None = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode)
        except FileNotFoundError:
            stamp = None
        if stamp != self._stamp:
            with self._lock:
                if stamp != self._stamp:
                    try:
                        entries = read(self.path) if stamp is not None else []
                    except ConvMemError as exc:
                        log.error("named tokens refused: %s", exc.message)
                        entries = []
                    self._by_id = {e.token_id: (e, e.principal) for e in entries}
                    self._stamp = stamp
        return self._by_id

    def principal(self, token: str) -> Principal | None:
        """The principal of a named token; None when it is unknown, revoked or wrong."""
        parts = split(token)
        if parts is None:
            return None
        found = self._fresh().get(parts[0])
        if found is None or not hmac.compare_digest(_digest(found[0].salt, parts[1]), found[0].digest):
            return None
        return found[1]

    def named(self, token_id: str) -> Principal | None:
        """The principal of the named token with this id while it is not revoked (a browser
        signed in with it is refused at its next request once it is)."""
        found = self._fresh().get(token_id)
        return None if found is None else found[1]

    def __repr__(self) -> str:
        return f"TokenFile({self.path!r})"
