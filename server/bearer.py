"""The HTTP server's bearer check over every token it knows, and the principal of a call.

:class:`BearerVerifier` is the SDK's ``TokenVerifier``: the single token of
``serve --http`` (principal ``default``, full access) and the named tokens of
:class:`~server.tokens.TokenFile` (re-read when the file changes, so a revoked
token is refused at its next request).  The principal travels in the SDK's
``AccessToken.claims``; :func:`current` reads it back, inside a tool call,
through the SDK's ``get_access_token()`` (no token: stdio, or HTTP without
authentication in tests — the principal ``local``).
"""

from __future__ import annotations

import functools
import hmac

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken

from .principals import DEFAULT, LOCAL, Principal
from .tokens import TokenFile

CLIENT_ID = "convmem-token"
CLAIM = "convmem_principal"


def claims(principal: Principal) -> dict:
    return {CLAIM: {"name": principal.name, "read_only": principal.read_only, "sessions": list(principal.sessions)}}


class BearerVerifier:
    """The single token (``default``) and the named ones of a tokens file."""

    def __init__(self, token: str | None, tokens: TokenFile | None) -> None:
        self._expected = token.encode("ascii") if token is not None else None
        self.tokens = tokens
        self._default = AccessToken(token="<redacted>", client_id=CLIENT_ID, scopes=[], claims=claims(DEFAULT))

    async def verify_token(self, token: str) -> AccessToken | None:
        principal = self.principal(token)
        if principal is None:
            return None
        if principal is DEFAULT:
            return self._default
        # the AccessToken's own ``token`` field is not the secret: it lands in the request scope
        return AccessToken(token="<redacted>", client_id=CLIENT_ID, scopes=[], claims=claims(principal))

    def principal(self, token: str) -> Principal | None:
        if self.tokens is not None:
            named = self.tokens.principal(token)
            if named is not None:
                return named
        given = token.encode("utf-8", "surrogatepass")
        if self._expected is not None and hmac.compare_digest(given, self._expected):
            return DEFAULT
        return None

    def __repr__(self) -> str:               # never the token, not even in a traceback's locals
        return "BearerVerifier(<token>)"


def current() -> Principal:
    """The principal of the call being handled (``local`` when there is no access token)."""
    access = get_access_token()
    if access is None or not access.claims or CLAIM not in access.claims:
        return LOCAL
    c = access.claims[CLAIM]
    return _principal(c["name"], bool(c["read_only"]), tuple(c["sessions"]))


@functools.lru_cache(maxsize=256)
def _principal(name: str, read_only: bool, sessions: tuple[str, ...]) -> Principal:
    """The principal of a claim, built once (its patterns are compiled when it is made)."""
    if name == DEFAULT.name and not read_only and not sessions:
        return DEFAULT
    return Principal(name, read_only, sessions)
