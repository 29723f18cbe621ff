"""Signing a browser in: the bearer token pasted once, then a signed cookie.

The cookie never holds a token.  It is ``ISSUED.SUBJECT.NONCE.MAC``: the
time it was issued (seconds), whose token signed in (``default`` for the
server's own token, ``id:ID`` for a named token's public id), 16 random bytes,
and an HMAC-SHA256 of the rest under a key derived from the server's token, so
every process serving the same store with the same token accepts it, and
changing that token signs every browser out.  It is valid for
:data:`LIFETIME` seconds; the pages turn its subject back into a principal at
every request, so a revoked named token's browsers are signed out at once.  The CSRF token of a form is an HMAC
of the cookie under the same key: a page can only be written to with a token
that was rendered into a page for that cookie.  Every comparison is constant
time (:func:`hmac.compare_digest`).  Without a server token (tests only)
every request counts as signed in.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

COOKIE = "convmem_ui"
LIFETIME = 12 * 3600            # seconds a sign-in lasts
_PURPOSE = b"convmem browser sign-in v1"


class Signer:
    def __init__(self, token: str | None) -> None:
        self.open = token is None
        self._token = (token or "").encode("utf-8")
        secret = self._token if token is not None else secrets.token_bytes(32)
        self._key = hmac.new(secret, _PURPOSE, hashlib.sha256).digest()

    def __repr__(self) -> str:           # never the token, not even in a traceback's locals
        return "Signer(<key>)"

    def _mac(self, purpose: str, value: str) -> str:
        return hmac.new(self._key, f"{purpose}|{value}".encode(), hashlib.sha256).hexdigest()

    def token_matches(self, given: str) -> bool:
        """Whether ``given`` (surrounding white space removed) is the server's token."""
        if self.open:
            return True
        return hmac.compare_digest(given.strip().encode("utf-8", "surrogatepass"), self._token)

    def issue(self, subject: str, now: float) -> str:
        """A new cookie value for ``subject`` (no ``.`` in it), issued at ``now`` (seconds since the epoch)."""
        body = f"{int(now)}.{subject}.{secrets.token_urlsafe(16)}"
        return f"{body}.{self._mac('cookie', body)}"

    def subject(self, cookie: str | None, now: float) -> str | None:
        """The subject of ``cookie`` when this key issued it and it has not expired, else None."""
        if not cookie or cookie.count(".") != 3:
            return None
        body, _, mac = cookie.rpartition(".")
        issued, subject, _ = body.split(".")
        if not hmac.compare_digest(mac, self._mac("cookie", body)) or not issued.isdigit():
            return None
        return subject if 0 <= now - int(issued) <= LIFETIME else None

    def csrf(self, cookie: str | None) -> str:
        """The CSRF token of the forms rendered for ``cookie``."""
        return self._mac("csrf", cookie or "")

    def csrf_matches(self, cookie: str | None, given: str) -> bool:
        return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), self.csrf(cookie).encode())
