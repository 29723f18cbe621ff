"""The error tree and the one table that translates foreign exceptions."""

from __future__ import annotations

import errno

import cbor2
import lmdb
import pytest

from eventstore import errors
from eventstore.errors import (
    BusyError,
    ConflictError,
    ConvMemError,
    CorruptStoreError,
    InternalError,
    NotFoundError,
    StoreIOError,
    ValidationError,
    translate,
)

TABLE = [
    (lmdb.CorruptedError("x"), "CORRUPT_STORE"),
    (lmdb.PageNotFoundError("x"), "CORRUPT_STORE"),
    (lmdb.InvalidError("x"), "CORRUPT_STORE"),
    (lmdb.VersionMismatchError("x"), "CORRUPT_STORE"),
    (lmdb.BadChecksumError("x"), "CORRUPT_STORE"),
    (lmdb.IncompatibleError("x"), "CORRUPT_STORE"),
    (cbor2.CBORDecodeError("x"), "CORRUPT_STORE"),
    (cbor2.CBORDecodeEOF("x"), "CORRUPT_STORE"),
    (lmdb.DiskError("x"), "IO_ERROR"),
    (lmdb.MapFullError("x"), "IO_ERROR"),
    (OSError(errno.ENOSPC, "No space left on device"), "IO_ERROR"),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), "IO_ERROR"),
    (OSError(errno.EFBIG, "File too large"), "IO_ERROR"),
    (OSError(errno.EIO, "Input/output error"), "IO_ERROR"),
    (PermissionError(errno.EACCES, "Permission denied"), "IO_ERROR"),
    (FileNotFoundError(errno.ENOENT, "No such file"), "IO_ERROR"),
    (lmdb.ReadonlyError("x"), "IO_ERROR"),
    (lmdb.LockError("x"), "IO_ERROR"),
    (lmdb.PanicError("x"), "IO_ERROR"),
    (lmdb.Error("x"), "IO_ERROR"),
    (lmdb.MemoryError("x"), "INTERNAL_ERROR"),
    (MemoryError(), "INTERNAL_ERROR"),
    (OSError(errno.ENOMEM, "Cannot allocate memory"), "INTERNAL_ERROR"),
    (lmdb.ReadersFullError("x"), "INTERNAL_ERROR"),
    (lmdb.TxnFullError("x"), "INTERNAL_ERROR"),
    (lmdb.DbsFullError("x"), "INTERNAL_ERROR"),
    (lmdb.BadValsizeError("x"), "INTERNAL_ERROR"),
    (lmdb.BadTxnError("x"), "INTERNAL_ERROR"),
    (ValueError("x"), "INTERNAL_ERROR"),
    (KeyError("x"), "INTERNAL_ERROR"),
    (cbor2.CBOREncodeError("x"), "INTERNAL_ERROR"),
]


@pytest.mark.parametrize("foreign, code", TABLE, ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else v)
def test_each_foreign_exception_translates_to_its_spec_code(foreign, code):
    ours = translate(foreign, "writing to the store")
    assert isinstance(ours, ConvMemError)
    assert ours.code == code
    assert ours.message.startswith("writing to the store: ")


def test_translation_names_the_class_but_never_the_foreign_message():
    ours = translate(lmdb.Error("/secret/path/to/store: secret detail"), "opening the store")
    assert "secret" not in ours.message
    assert "Error" in ours.message


def test_one_of_our_errors_passes_through_translation_unchanged():
    mine = NotFoundError("message_id: no live message has this id")
    assert translate(mine, "anything") is mine


@pytest.mark.parametrize("cls, code", [
    (ValidationError, "VALIDATION_ERROR"), (NotFoundError, "NOT_FOUND"), (ConflictError, "CONFLICT"),
    (BusyError, "BUSY"), (StoreIOError, "IO_ERROR"), (CorruptStoreError, "CORRUPT_STORE"),
    (InternalError, "INTERNAL_ERROR"),
])
def test_every_spec_code_has_one_class_under_the_root(cls, code):
    err = cls("field: constraint")
    assert isinstance(err, ConvMemError)
    assert err.code == code
    assert err.message == "field: constraint" == str(err)


def test_the_module_docstring_draws_every_class_of_the_tree():
    names = {c.__name__ for c in ConvMemError.__subclasses__()}
    assert names == {"ValidationError", "NotFoundError", "ConflictError", "BusyError",
                     "StoreIOError", "CorruptStoreError", "InternalError"}
    assert all(n in errors.__doc__ for n in names)
