"""Export every live message to the JSONL archive (:mod:`server.archive`), and
import one back.

Import writes the file's messages exactly as they are (:meth:`MemoryService.
restore_messages`), ``BATCH`` messages per durable transaction.  It accepts a
store only when the store holds nothing but messages of the file, unchanged:
an empty store, or one that an earlier run of the same import filled, wholly
or in part (an interrupted run).  It then adds the messages the store lacks.
Anything else is refused before anything is written: a live message of the
store missing from the file, or one whose fields differ.  So export → import
into an empty store → export gives the same bytes, and a re-run is a no-op.

Both directions check every message with :func:`server.validation.message`,
so an export holds only what an import takes; an import checks each once,
on the first of its two reads of the file (the one before anything is
written): the second read checks only a line that is not the same as then
(the file changed meanwhile), and the write takes them as checked.  A store written by an older
importer may hold a message with empty content (an empty tool output): the
export writes it as importers now store one, ``(empty)`` tagged ``empty``.
"""

from __future__ import annotations

import contextlib
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from itertools import islice
from typing import IO

from eventstore.errors import ValidationError
from eventstore.events import Message

from . import archive, validation
from .service import MemoryService

BATCH = 1000


def export(service: MemoryService, out: IO[str], step: Callable[[int], None] = lambda n: None) -> int:
    """Write the archive of every live message to ``out``; the number written.
    One read transaction: the export is one consistent state of the store."""
    try:
        with service.snapshot_events() as (count, live):
            try:
                out.write(archive.header(count))
                for event in live:
                    out.write(archive.line(exportable(event.message), event.principal))
                    step(1)
            except OSError as exc:      # the output's failure, not the store's: keep it apart
                raise _OutputFailed(exc) from exc
    except _OutputFailed as failed:
        raise failed.error from None
    return count


def exportable(msg: Message) -> Message:
    """``msg`` checked with :func:`validation.message`; one stored with empty
    content (an older import) as importers now write it.  ``VALIDATION_ERROR``
    naming the message for anything else the contract does not allow."""
    try:
        return validation.message(msg)
    except ValidationError as exc:
        if msg.content == "":
            content, tags = validation.empty_placeholder("", msg.metadata.tags)
            fixed = replace(msg, content=content, metadata=replace(msg.metadata, tags=tags))
            with contextlib.suppress(ValidationError):
                return validation.message(fixed)
        raise ValidationError(f"message {msg.message_id} cannot be exported: {exc.message}") from None


class _OutputFailed(Exception):
    """Carries an ``OSError`` of the output past the store's read transaction,
    which would take it for a storage error."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True)
class Plan:
    in_file: int        # messages in the file
    present: int        # of which the store holds already, identical
    missing: int        # of which the import writes


class Refused(Exception):
    """The store holds messages that are not the file's: nothing was written."""


def check(service: MemoryService, entries: Iterable[tuple[Message, str | None]]) -> Plan:
    """Walk the file's messages and the store's live ones side by side (both in
    id order): :class:`Refused` unless every stored one is in the file, equal."""
    in_file = present = 0
    with service.snapshot() as (_, live):
        stored = next(live, None)
        for msg, _principal in entries:
            in_file += 1
            if stored is not None and stored.message_id < msg.message_id:
                raise Refused(f"the store holds message {stored.message_id}, which the file does not: "
                              "import into an empty store (see docs/cli.md)")
            if stored is not None and stored.message_id == msg.message_id:
                if stored != msg:
                    raise Refused(f"message {msg.message_id} is in the store with other fields than in the file")
                present += 1
                stored = next(live, None)
        if stored is not None:
            raise Refused(f"the store holds message {stored.message_id}, which the file does not: "
                          "import into an empty store (see docs/cli.md)")
    return Plan(in_file, present, in_file - present)


def write(service: MemoryService, entries: Iterable[tuple[Message, str | None]],
          step: Callable[[int], None] = lambda n: None) -> int:
    """Write the messages the store lacks, ``BATCH`` per transaction, each recorded as made by
    its line's principal (none for a line without one, so that export → import → export
    gives the same bytes); the number written.  ``entries``: messages checked with
    :func:`server.validation.message` already (not again here)."""
    written = 0
    for batch in _batches(iter(entries)):
        written += service.restore_messages([m for m, _ in batch], [p for _, p in batch],
                                            default_principal=None, checked=True)
        step(len(batch))
    return written


def _batches(entries: Iterator[tuple[Message, str | None]]) -> Iterator[list[tuple[Message, str | None]]]:
    while batch := list(islice(entries, BATCH)):
        yield batch


def read_file(fh: IO[str], name: str, seen: array[int] | None = None,
              known: array[int] | None = None) -> Iterator[tuple[Message, str | None]]:
    """The messages of the archive open as ``fh`` (``VALIDATION_ERROR`` names ``name`` and the line);
    ``seen`` and ``known``: a first read's line hashes, and a second read's (:func:`server.archive.read`)."""
    try:
        yield from archive.read(fh, seen, known)
    except UnicodeDecodeError:
        raise ValidationError(f"{name}: is not UTF-8 text") from None
    except ValidationError as exc:
        raise ValidationError(f"{name}: {exc.message}") from None
