"""Search filters answered from the facet lists (query side of the term index).

``facets`` (dupsort, dupfixed 6) holds one list of docnos per filter value:
``s`` + session id, ``k`` + kind, ``t`` + tier, ``i`` + importance, ``g`` + tag
(see :func:`~.records.facet_keys`).
"""

from __future__ import annotations

from typing import Protocol

from eventstore.events import KINDS, TIERS
from eventstore.transaction import Tx

from .docs import DOC_IMPORTANCE, DOC_KIND, DOC_SESSION, DOC_TIER, Doc, doc, raw_doc
from .layout import FACETS, docno_key
from .records import Pending

# a condition's name: the filter's field, or ("tag", the tag)
_Name = str | tuple[str, str]


class Filter(Protocol):
    """What a search filters on (``projections.search.Filters``)."""

    @property
    def session_id(self) -> str | None: ...
    @property
    def kinds(self) -> frozenset[str]: ...
    @property
    def tiers(self) -> frozenset[str]: ...
    @property
    def tags(self) -> tuple[str, ...]: ...
    @property
    def min_importance(self) -> int: ...


class FacetFilter:
    """Search filters answered from the facet lists: the shortest list that
    applies (built into a set of docnos when small enough), plus a per-document
    check, on the ``docs`` bytes, of whatever that list does not settle.
    Pending documents are not in the facet lists yet: :meth:`passes_pending`
    checks their record's facet keys instead.

    A condition every live message meets (``kinds`` naming every kind in use,
    say) filters nothing and is dropped.
    """

    def __init__(self, tx: Tx, flt: Filter, n_docs: int) -> None:
        """``flt`` has ``session_id``, ``kinds``, ``tiers``, ``tags``, ``min_importance``."""
        self.tx, self.flt = tx, flt
        self.allowed: set[int] | None = None
        self.size = -1                       # -1: nothing to filter
        self._docs: dict[int, Doc | None] = {}
        self._verdicts: dict[int, bool] = {}
        conditions = self._conditions()
        self._any = [frozenset(keys) for _, keys in conditions]
        with tx.txn.cursor(db=tx.db(FACETS)) as cur:
            sized = [(sum(cur.count() if cur.set_key(k) else 0 for k in keys), name, keys)
                     for name, keys in conditions]
        sized = [c for c in sized if c[0] < n_docs or c[0] == 0]
        self._pending = {name for _, name, _ in sized}
        if sized:
            self.size, self._best, self._keys = min(sized, key=lambda c: c[0])
        self.checks = bool(self._pending)    # documents must be checked one by one
        self._kinds = {KINDS.index(k) for k in flt.kinds}
        self._tiers = {TIERS.index(t) for t in flt.tiers}
        self._session = (flt.session_id or "").encode("utf-8")

    def _conditions(self) -> list[tuple[_Name, list[bytes]]]:
        """Each condition, named, as the facet keys whose union it allows."""
        f = self.flt
        out: list[tuple[_Name, list[bytes]]] = []
        if f.session_id is not None:
            out.append(("session", [b"s" + f.session_id.encode("utf-8")]))
        if f.kinds:
            out.append(("kinds", [b"k" + bytes([KINDS.index(k)]) for k in sorted(f.kinds)]))
        if f.tiers:
            out.append(("tiers", [b"t" + bytes([TIERS.index(t)]) for t in sorted(f.tiers)]))
        if f.min_importance:
            out.append(("importance", [b"i" + bytes([i]) for i in range(f.min_importance, 101)]))
        out.extend((("tag", t), [b"g" + t.encode("utf-8")]) for t in dict.fromkeys(f.tags))
        return out

    def passes_pending(self, record: Pending) -> bool:
        return all(not keys.isdisjoint(record.facets) for keys in self._any)

    def materialize(self, limit: int) -> bool:
        """Build the set of allowed (merged) docnos when it has at most ``limit``."""
        if self.size < 0 or self.size > limit:
            return False
        allowed: set[int] = set()
        with self.tx.txn.cursor(db=self.tx.db(FACETS)) as cur:
            for key in self._keys:
                if cur.set_key(key):
                    allowed.update(int.from_bytes(v, "big") for v in cur.iternext_dup(keys=False))
        self.allowed = allowed
        self._pending.discard(self._best)
        self.checks = bool(self._pending)
        return True

    def doc(self, docno: int) -> Doc | None:
        if docno not in self._docs:
            self._docs[docno] = doc(self.tx, docno)
        return self._docs[docno]

    def passes(self, docno: int) -> bool:
        """Whether a merged document passes."""
        if self.allowed is not None and docno not in self.allowed:
            return False
        if not self.checks:
            return True
        verdict = self._verdicts.get(docno)
        if verdict is None:
            verdict = self._verdicts[docno] = self._check(docno)
        return verdict

    def _check(self, docno: int) -> bool:
        raw = raw_doc(self.tx, docno)
        if raw is None:
            return False
        for name in self._pending:
            if name == "session":
                ok = raw[DOC_SESSION:] == self._session
            elif name == "kinds":
                ok = raw[DOC_KIND] in self._kinds
            elif name == "tiers":
                ok = raw[DOC_TIER] in self._tiers
            elif name == "importance":
                ok = raw[DOC_IMPORTANCE] >= self.flt.min_importance
            else:
                with self.tx.txn.cursor(db=self.tx.db(FACETS)) as cur:
                    ok = cur.set_key_dup(b"g" + name[1].encode("utf-8"), docno_key(docno))
            if not ok:
                return False
        return True
