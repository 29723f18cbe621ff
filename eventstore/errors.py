"""The exception tree of Tiny ConvMem: one class per error code (docs/tools.md §Error codes).

    ConvMemError                 (root, never raised itself)
    ├── ValidationError          VALIDATION_ERROR
    ├── NotFoundError            NOT_FOUND
    ├── ConflictError            CONFLICT
    ├── BusyError                BUSY
    ├── StoreIOError             IO_ERROR
    ├── CorruptStoreError        CORRUPT_STORE
    │   └── DamagedRecordError   (also a ValueError: raised by decoders such as ids.to_str)
    └── InternalError            INTERNAL_ERROR

Messages name the field and the constraint, never the offending value.
Foreign exceptions (``lmdb.*``, CBOR decoding, ``OSError``) are translated
exactly once, by :func:`translate`, at the storage boundary.

Only two kinds of failure may say the store is damaged: LMDB or the OS
reporting one (translated at the boundary), and stored bytes that do not
decode — which the decoding code reports itself, as ``CorruptStoreError``
(decode inside :func:`decoding`, or check and raise).  Any other exception is
a bug of ours: it stays ``INTERNAL_ERROR`` and never marks the store damaged.
"""

from __future__ import annotations

import contextlib
import errno
import struct
from collections.abc import Iterator


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


class DamagedRecordError(CorruptStoreError, ValueError):
    """Stored bytes of the wrong shape, found by a decoder whose contract is a
    ``ValueError`` (``ids.to_str``): either ``except`` catches it."""


class InternalError(ConvMemError):
    code = "INTERNAL_ERROR"


# what decoding malformed bytes raises: ValueError (UnicodeDecodeError among
# them), struct.error, TypeError and LookupError (a field of the wrong type,
# an index or key out of range)
DECODING_ERRORS: tuple[type[Exception], ...] = (ValueError, TypeError, LookupError, struct.error)


@contextlib.contextmanager
def decoding(what: str) -> Iterator[None]:
    """Decode stored bytes inside: if they do not decode, ``CORRUPT_STORE``.

        with decoding("a history key"):
            return _TS.unpack(k[:8])[0], k[8:].decode("utf-8")

    ``what`` names the record.  Keep the block to the decoding itself: a bug
    inside it would be reported as damage.
    """
    try:
        yield
    except ConvMemError:
        raise
    except DECODING_ERRORS as exc:
        raise CorruptStoreError(f"{what} could not be decoded ({type(exc).__name__})") from exc


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
