"""Search filters answered from the index (query side of the term index).

``facets`` (dupsort, dupfixed 6) holds one list of docnos per filter value:
``s`` + session id, ``k`` + kind, ``t`` + tier, ``i`` + importance, ``r`` +
role, ``g`` + tag (see :func:`~.records.facet_keys`); ``times`` holds every
document in timestamp order, so a time window is a range of keys.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from eventstore.events import KINDS, ROLES, TIERS
from eventstore.transaction import Tx

from . import masks, times
from .docs import DOC_IMPORTANCE, DOC_KIND, DOC_ROLE, DOC_SESSION, DOC_TIER, DOC_TIME, Doc, doc, raw_doc, raw_docs
from .layout import FACETS, docno_key
from .records import Pending, tag_key

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
    @property
    def roles(self) -> frozenset[str]: ...
    @property
    def after(self) -> int | None: ...
    @property
    def before(self) -> int | None: ...


TIME_SCAN = 10_001          # ``times`` keys counted at most to size a time window
MASK_AFTER = 512            # documents asked about before a search reads the facet lists whole (.masks)
TIME_MASK_MAX = 200_000     # a time window's documents read whole into an array (likewise) at most
_NEVER = 1 << 64            # past every timestamp


class FacetFilter:
    """Search filters answered from the facet lists: the shortest list that
    applies (built into a set of docnos when small enough), plus a per-document
    check, on the ``docs`` bytes, of whatever that list does not settle.
    Pending documents are not in the facet lists yet: :meth:`passes_pending`
    checks their record's facet keys instead.

    A time window (``after`` ≤ timestamp < ``before``) is a range of the
    ``times`` keys: sized by counting them (up to ``TIME_SCAN``), built into a
    set like a facet list when it is the smallest condition, else checked on
    each document's ``docs`` row.

    A condition every live message meets (``kinds`` naming every kind in use,
    say) filters nothing and is dropped.
    """

    def __init__(self, tx: Tx, flt: Filter, n_docs: int, changes: tuple[int, ...] | None = None) -> None:
        """``flt`` has ``session_id``, ``kinds``, ``tiers``, ``tags``, ``min_importance``;
        ``changes``: the store's counts of updates and deletes (:func:`.masks.mask`)."""
        self.tx, self.flt, self._changes = tx, flt, changes
        self.allowed_docnos: np.ndarray | None = None     # the allowed set (materialize), sorted
        self._allowed: set[int] | None = None
        self.size = -1                       # -1: nothing to filter
        self._docs: dict[int, Doc | None] = {}
        self._verdicts: dict[int, bool] = {}
        self._window_found: np.ndarray | None = None
        self._mask: np.ndarray | None = None
        self._no_time_mask = False           # the time window is too large to read whole
        self._asked = 0
        conditions = self._conditions()
        self._facet_keys: dict[_Name, list[bytes]] = dict(conditions)
        self._any = [frozenset(keys) for _, keys in conditions]
        with tx.txn.cursor(db=tx.db(FACETS)) as cur:
            sized = [(sum(cur.count() if cur.set_key(k) else 0 for k in keys), name, keys)
                     for name, keys in conditions]
        self._window = self._time_window()
        if self._window is not None:
            sized.append((self._count_window(min(n_docs, TIME_SCAN)), "time", []))
        sized = [c for c in sized if c[0] < n_docs or c[0] == 0]
        self._pending = {name for _, name, _ in sized}
        if sized:
            self.size, self._best, self._keys = min(sized, key=lambda c: c[0])
        self.checks = bool(self._pending)    # documents must be checked one by one
        self._kinds = {KINDS.index(k) for k in flt.kinds}
        self._tiers = {TIERS.index(t) for t in flt.tiers}
        self._roles = {ROLES.index(r) for r in flt.roles}
        self._session = (flt.session_id or "").encode("utf-8")

    def _time_window(self) -> tuple[int, int] | None:
        """(first timestamp allowed, first one past the window), if the filter has one."""
        after, before = self.flt.after, self.flt.before
        if after is None and before is None:
            return None
        return after or 0, _NEVER if before is None else before

    def _window_bounds(self) -> tuple[int, int]:
        """(first timestamp allowed, first one past), as ``times`` bounds."""
        lo, hi = self._window or (0, _NEVER)
        return lo, min(max(hi, lo), _NEVER - 1)

    def _count_window(self, cap: int) -> int:
        """Documents in the time window, counted up to ``cap``."""
        found = self._window_docnos(cap - 1)
        return cap if found is None else len(found)

    def _window_docnos(self, cap: int | None = None) -> np.ndarray | None:
        """The time window's docnos in ``times`` order (found once a search,
        :mod:`.times`), or None when there are more than ``cap``."""
        if self._window_found is None:
            deletes = None if self._changes is None else self._changes[-1:]   # updates leave ``times`` alone
            found = times.window(self.tx, *self._window_bounds(), deletes, cap)
            if found is None:
                return None
            self._window_found = found
        return self._window_found

    def _in_window(self, timestamp: int) -> bool:
        lo, hi = self._window or (0, _NEVER)
        return lo <= timestamp < hi

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
        if f.roles:
            out.append(("roles", [b"r" + bytes([ROLES.index(r)]) for r in sorted(f.roles)]))
        out.extend((("tag", t), [tag_key(t)]) for t in dict.fromkeys(f.tags))
        return out

    def pending_conditions(self) -> tuple[list[frozenset[bytes]], tuple[int, int] | None]:
        """What a pending document must have to pass (:meth:`passes_pending`):
        one facet key of each set, and a timestamp in the window (first
        allowed, first past), if there is one."""
        return self._any, self._window

    def passes_pending(self, record: Pending) -> bool:
        if not all(not keys.isdisjoint(record.facets) for keys in self._any):
            return False
        if self._window is None:
            return True
        raw = raw_doc(self.tx, record.docno)
        return raw is not None and self._in_window(int.from_bytes(raw[DOC_TIME:DOC_TIME + 8], "big"))

    def materialize(self, limit: int) -> bool:
        """Build the set of allowed (merged) docnos when it has at most ``limit``."""
        if self.size < 0 or self.size > limit:
            return False
        parts = []
        if self._best == "time" and (window := self._window_docnos()) is not None:
            parts.append(window)
        parts.extend(masks.facet_docnos(self.tx, key) for key in self._keys)
        self.allowed_docnos = masks.distinct(np.concatenate(parts)) if parts else np.zeros(0, np.int64)
        self._pending.discard(self._best)
        self.checks = bool(self._pending)
        return True

    def doc(self, docno: int) -> Doc | None:
        if docno not in self._docs:
            self._docs[docno] = doc(self.tx, docno)
        return self._docs[docno]

    @property
    def allowed(self) -> set[int] | None:
        """The allowed set as a set (built from :attr:`allowed_docnos` when first asked)."""
        if self._allowed is None and self.allowed_docnos is not None:
            self._allowed = set(self.allowed_docnos.tolist())
        return self._allowed

    def passes(self, docno: int) -> bool:
        """Whether a merged document passes."""
        allowed = self.allowed
        if allowed is not None and docno not in allowed:
            return False
        if not self.checks:
            return True
        verdict = self._verdicts.get(docno)
        if verdict is None:
            verdict = self._verdicts[docno] = self._check(docno)
        return verdict

    def meets(self, docnos: np.ndarray) -> np.ndarray:
        """Whether each of the merged ``docnos`` meets the conditions checked
        per document (:meth:`passes` less the allowed set): on their ``docs``
        rows, or — once a search has asked about many, or the snapshot has
        one kept — on its facet lists read as one array (:mod:`.masks`)."""
        if not self.checks:
            return np.ones(len(docnos), bool)
        if self._mask is None and not self._no_time_mask:
            self._asked += len(docnos)
            facets = self._checked_facets()
            if "time" not in self._pending:
                self._mask = (masks.mask(self.tx, facets, self._changes) if self._asked > MASK_AFTER
                              else masks.kept(self.tx, facets, self._changes))
            elif self._asked > MASK_AFTER:
                self._mask = self._time_mask(facets)
        if self._mask is not None:
            inside = docnos < len(self._mask)
            return inside & self._mask[np.where(inside, docnos, 0)]
        todo = [d for d in docnos.tolist() if d not in self._verdicts]
        for d, raw in zip(todo, raw_docs(self.tx, todo)):
            self._verdicts[d] = raw is not None and self._meets(d, raw)
        return np.fromiter(map(self._verdicts.__getitem__, docnos.tolist()), bool, len(docnos))

    def ready(self) -> bool:
        """Whether :meth:`meets` is one array step now: nothing to check, or
        the mask in hand or kept for this snapshot (looked up, not read)."""
        if not self.checks:
            return True
        if self._mask is None and "time" not in self._pending:
            self._mask = masks.kept(self.tx, self._checked_facets(), self._changes)
        return self._mask is not None

    def _checked_facets(self) -> list[list[bytes]]:
        """The facet keys of the conditions checked per document (the time window aside)."""
        return [self._facet_keys[name] for name in sorted(self._pending, key=str) if name != "time"]

    def _time_mask(self, facets: list[list[bytes]]) -> np.ndarray | None:
        """The documents in the time window that meet the facet conditions, as
        a bool array by docno: the window's documents all found (this search
        only: windows differ from query to query) — unless it holds more than
        ``TIME_MASK_MAX`` documents (then None, and rows are checked)."""
        inside = self._window_docnos(TIME_MASK_MAX)
        if inside is None:
            self._no_time_mask = True
            return None
        kept = masks.mask(self.tx, facets, self._changes) if facets else None
        out = np.zeros(max(int(inside.max()) + 1 if len(inside) else 0, 0 if kept is None else len(kept)), bool)
        out[inside] = True
        if kept is not None:
            out[:len(kept)] &= kept
            out[len(kept):] = False
        return out

    def _check(self, docno: int) -> bool:
        raw = raw_doc(self.tx, docno)
        return raw is not None and self._meets(docno, raw)

    def _meets(self, docno: int, raw: bytes) -> bool:
        """Whether a document whose ``docs`` row is ``raw`` meets the conditions
        its facet list did not settle."""
        for name in self._pending:
            if name == "session":
                ok = raw[DOC_SESSION:] == self._session
            elif name == "kinds":
                ok = raw[DOC_KIND] in self._kinds
            elif name == "tiers":
                ok = raw[DOC_TIER] in self._tiers
            elif name == "importance":
                ok = raw[DOC_IMPORTANCE] >= self.flt.min_importance
            elif name == "roles":
                ok = raw[DOC_ROLE] in self._roles
            elif name == "time":
                ok = self._in_window(int.from_bytes(raw[DOC_TIME:DOC_TIME + 8], "big"))
            else:
                with self.tx.txn.cursor(db=self.tx.db(FACETS)) as cur:
                    ok = cur.set_key_dup(tag_key(name[1]), docno_key(docno))
            if not ok:
                return False
        return True
