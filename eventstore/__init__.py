"""The write side: events, their codec, ids, errors and the LMDB log.

Modules, each importing only those above it in this list:

    errors        the exception tree; ``decoding()`` for decoders of stored bytes
    events        one frozen dataclass per fact
    ids           message ids (ULIDs) as text and as key bytes
    codec         the byte layout of events and of the log's keys
    files         owner-only directories and files, fsync, preallocation
    locks         the directory lock across processes
    environment   one LMDB environment: transactions, map growth, copies
    bulk          what a bulk transaction gets: map room first, no cyclic GC
    meta          the ``meta`` sub-database's keys and values
    transaction   ``Tx``, ``WriteTx``, and what the store asks of a ``Projector``
    replay        the log applied to the read models a batch at a time
    store         the event log: ``EventStore``
    compaction    the log rewritten as one event per live message
"""
