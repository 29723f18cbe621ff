"""What a browser page may ask of the store: the tools' own calls, through one method.

:meth:`Reader.tool` runs a tool exactly as an MCP call does (the same
parameter checks, the same service call as the same principal, the same JSON
body), so a token's scope and read-only limit apply to the pages as to its
tool calls.  It raises the store's own errors
(:class:`~eventstore.errors.ConvMemError`) instead of wrapping them in a
result.  The health page's per-day counts are the one read that is not a
tool (:meth:`Reader.written_per_day`).
"""

from __future__ import annotations

from typing import Any

from eventstore.errors import ConvMemError, InternalError

from ..app import AppState
from ..principals import Principal
from ..service import MemoryService
from ..tools import BY_NAME

WRITES = frozenset({"delete_message"})          # the only tool a page may call that writes


class Reader:
    """The store as ``principal`` (the signed-in browser's token) may see and change it."""

    def __init__(self, state: AppState, principal: Principal) -> None:
        self._state = state
        self.principal = principal

    def _service(self) -> MemoryService:
        if self._state.service is None:
            raise self._state.open_error or InternalError("the store is not open")
        return self._state.service

    def tool(self, name: str, arguments: dict[str, Any]) -> dict:
        """The JSON body of tool ``name`` called with ``arguments`` (raises ``ConvMemError``)."""
        spec = BY_NAME[name]
        if spec.writes and name not in WRITES:
            raise ConvMemError(f"{name}: the browser pages do not call it")
        return spec.call(self._service(), arguments, self.principal)

    def written_per_day(self, days: int) -> tuple[dict[int, int], int]:
        """Live messages by UTC day (days since the epoch) for the ``days`` days up to the
        newest message's, and how many are older (:meth:`MemoryService.written_per_day`)."""
        return self._service().written_per_day(days, principal=self.principal)
