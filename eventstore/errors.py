"""The exception tree of Tiny ConvMem: one class per error code (docs/tools.md §Error codes).

    ConvMemError                 (root, never raised itself)
    ├── ValidationError          VALIDATION_ERROR
    ├── NotFoundError            NOT_FOUND
    ├── ConflictError            CONFLICT
    ├── BusyError                BUSY
    ├── StoreIOError             IO_ERROR
    ├── CorruptStoreError        CORRUPT_STORE
    └── InternalError            INTERNAL_ERROR

Messages name the field and the constraint, never the offending value.
Foreign exceptions (``lmdb.*``, CBOR decoding, ``OSError``) are translated
exactly once, by :func:`translate`, at the storage boundary.
"""

from __future__ import annotations

import errno


class ConvMemError(Exception):
    """Root of every application error; ``code`` is its error code in the tool results."""

    code = "INTERNAL_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ValidationError(ConvMemError):
    code = "VALIDATION_ERROR"


class NotFoundError(ConvMemError):
    code = "NOT_FOUND"


class ConflictError(ConvMemError):
    code = "CONFLICT"


class BusyError(ConvMemError):
    code = "BUSY"


class StoreIOError(ConvMemError):
    code = "IO_ERROR"


class CorruptStoreError(ConvMemError):
    code = "CORRUPT_STORE"


class InternalError(ConvMemError):
    code = "INTERNAL_ERROR"


_DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def _table() -> tuple:
    """(foreign classes, our class, what to say), first match wins."""
    import cbor2
    import lmdb

    return (
        ((lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.InvalidError, lmdb.VersionMismatchError,
          lmdb.BadChecksumError, lmdb.IncompatibleError, cbor2.CBORDecodeError),
         CorruptStoreError, "the store failed an integrity check"),
        ((lmdb.DiskError, lmdb.MapFullError), StoreIOError, "the disk is full or refused the write"),
        ((lmdb.ReadonlyError, PermissionError), StoreIOError, "the store is read-only"),
        ((lmdb.MemoryError, MemoryError, lmdb.ReadersFullError, lmdb.TxnFullError,
          lmdb.CursorFullError, lmdb.DbsFullError, lmdb.TlsFullError),
         InternalError, "out of memory or of an internal LMDB table"),
        ((lmdb.BadValsizeError, lmdb.BadTxnError, lmdb.BadDbiError, lmdb.BadRslotError),
         InternalError, "invalid internal state"),
        ((lmdb.Error, OSError), StoreIOError, "storage error"),
    )


_DISK_WORDS = ("No space left", "Input/output error", "File too large", "quota exceeded")


def _lmdb_disk_failure(exc: BaseException) -> bool:
    """A plain ``lmdb.Error`` carrying the OS's words for a refused write
    (LMDB reports a short write on a full disk as EIO)."""
    import lmdb
    return type(exc) is lmdb.Error and any(w in str(exc) for w in _DISK_WORDS)


def translate(exc: BaseException, action: str) -> ConvMemError:
    """Map a foreign exception raised while doing ``action`` to our tree."""
    if isinstance(exc, ConvMemError):
        return exc
    if isinstance(exc, OSError) and exc.errno in _DISK_FULL:
        return StoreIOError(f"{action}: the disk is full or refused the write")
    if _lmdb_disk_failure(exc):
        return StoreIOError(f"{action}: the disk is full or refused the write ({exc})")
    if isinstance(exc, OSError) and exc.errno == errno.ENOMEM:
        return InternalError(f"{action}: out of memory")
    for classes, ours, what in _table():
        if isinstance(exc, classes):
            return ours(f"{action}: {what} ({type(exc).__name__})")
    return InternalError(f"{action}: unexpected internal error ({type(exc).__name__})")
