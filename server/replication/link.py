"""The NATS client on its own event-loop thread, called from the writer thread.

nats-py is asyncio; the service is threads.  :class:`Link` runs one event
loop on a daemon thread; every public method is synchronous, hands a
coroutine to that loop (``asyncio.run_coroutine_threadsafe``) and waits for it
with a bound.  What NATS raises is translated here, once:

* :class:`Refused` — the stream refused a publish: its last sequence is not
  the one expected (``err_code`` 10071);
* :class:`Gone` — the stream of a generation does not exist (deleted, or not
  made yet);
* :class:`Unreachable` — anything else: no connection, no answer in time, no
  leader.  All three are ``IO_ERROR``.

:meth:`Link.follow` keeps one pull consumer reading a generation from a given
sequence and hands every batch to ``on_records`` (on the loop thread: it must
only queue them).  The consumer acknowledges nothing: how far this node got is
kept in its own store, in the transaction that applies the events.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.js import api
from nats.nuid import NUID

from eventstore.errors import StoreIOError

from . import layout
from .layout import Control, Record

log = logging.getLogger("convmem")
T = TypeVar("T")

CALL_TIMEOUT = 5.0            # seconds a call into the loop may take
PUBLISH_TIMEOUT = 2.0         # one publish attempt (the committer retries)
FETCH_BATCH = 5000
FETCH_WAIT = 0.5              # a pull request's expiry when nothing is new
IDLE_CHECK = 10               # idle fetches between two checks that the consumer still exists
RETRY_WAIT = 0.25
DUPLICATE_WINDOW = 120.0      # seconds: retries of one publish are de-duplicated within it
WRONG_LAST_SEQUENCE = 10071
STREAM_NOT_FOUND = 10059

OnRecords = Callable[[int, list[Record]], None]


class Unreachable(StoreIOError):
    """The stream did not answer (no connection, no leader, too slow)."""


class Refused(StoreIOError):
    """The stream's last sequence is not the one the publish expected."""


class Gone(StoreIOError):
    """The stream of a generation does not exist."""


def _translate(exc: BaseException, action: str) -> StoreIOError:
    if isinstance(exc, nats.js.errors.APIError):
        if exc.err_code == WRONG_LAST_SEQUENCE:
            return Refused(f"{action}: the stream moved on (another node wrote first)")
        if exc.err_code == STREAM_NOT_FOUND or isinstance(exc, nats.js.errors.NotFoundError):
            return Gone(f"{action}: the stream does not exist")
        return Unreachable(f"{action}: the stream refused ({exc.err_code or exc.code}: {exc.description})")
    return Unreachable(f"{action}: the stream is unreachable ({type(exc).__name__})")


class Link:
    def __init__(self, servers: tuple[str, ...], base: str, replicas: int, on_records: OnRecords) -> None:
        self.servers = servers
        self.base = base
        self.replicas = replicas
        self._on_records = on_records
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve_loop, name="convmem-nats", daemon=True)
        self._thread.start()
        self._nc: Any = None
        self._client: Any = None
        self._js: Any = None
        self._follow_task: asyncio.Task | None = None
        self._names = NUID()            # unique consumer names
        self.connected = False
        self._closing = False
        self._connector = self._submit(self._connect_forever())

    # ------------------------------------------------------------ plumbing
    def _serve_loop(self) -> None:
        """Runs the loop until :meth:`close`; what is left is cancelled and run out before it closes."""
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            rest = asyncio.all_tasks(loop)
            for task in rest:
                task.cancel()
            if rest:
                loop.run_until_complete(asyncio.wait(rest, timeout=2.0))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _call(self, coro: Coroutine[Any, Any, T], action: str, timeout: float = CALL_TIMEOUT) -> T:
        if self._nc is None or not self.connected:
            coro.close()
            raise Unreachable(f"{action}: the stream is unreachable (not connected)")
        future = self._submit(coro)
        try:
            return future.result(timeout)
        except StoreIOError:
            raise
        except (TimeoutError, nats.errors.Error, concurrent.futures.TimeoutError, OSError,
                ValueError, KeyError) as exc:         # the last two: an answer that is not what JetStream sends
            future.cancel()
            raise _translate(exc, action) from exc

    async def _connect_forever(self) -> None:
        while self._nc is None:
            try:
                self._client = nats.NATS()          # held, so that close() closes it even while connecting
                await self._client.connect(
                    servers=list(self.servers), name="convmem", connect_timeout=1, reconnect_time_wait=0.25,
                    max_reconnect_attempts=-1, allow_reconnect=True, ping_interval=2, max_outstanding_pings=3,
                    error_cb=self._on_error, disconnected_cb=self._on_disconnected,
                    reconnected_cb=self._on_reconnected)
                self._nc = self._client
                self._js = self._nc.jetstream(timeout=PUBLISH_TIMEOUT)
                self.connected = True
                log.info("replication: connected to %s", self._nc.connected_url.netloc)
            except asyncio.CancelledError:
                raise
            except Exception as exc:            # no server answered yet: keep trying
                log.debug("replication: cannot connect yet (%s)", exc)
                await asyncio.sleep(RETRY_WAIT)

    async def _on_error(self, exc: Exception) -> None:
        log.debug("replication: NATS client error: %s", exc)

    async def _on_disconnected(self) -> None:
        self.connected = False
        if not self._closing:
            log.warning("replication: disconnected from the stream; reconnecting")

    async def _on_reconnected(self) -> None:
        self.connected = True
        log.warning("replication: reconnected to %s", self._nc.connected_url.netloc)

    def wait_connected(self, timeout: float) -> bool:
        try:
            self._connector.result(timeout)
        except concurrent.futures.TimeoutError:
            return False
        return self.connected

    # ------------------------------------------------------------ streams
    def ensure(self, generation: int | None) -> None:
        """The control stream exists, and the stream of ``generation`` if one is given
        (each made if missing; a generation is made only by the node that fills it)."""
        self._call(self._ensure(generation), "creating the stream")

    async def _ensure(self, generation: int | None) -> None:
        common = dict(storage=api.StorageType.FILE, num_replicas=self.replicas, duplicate_window=DUPLICATE_WINDOW)
        await self._js.add_stream(name=layout.control_stream(self.base), max_msgs_per_subject=1,
                                  subjects=[layout.control_subject(self.base)], **common)
        if generation is not None:
            await self._js.add_stream(name=layout.stream(self.base, generation),
                                      subjects=[layout.root(self.base, generation) + ".>"], **common)

    def delete(self, generation: int) -> None:
        """Delete the stream of ``generation`` (nothing when it is gone already)."""
        try:
            self._call(self._js.delete_stream(layout.stream(self.base, generation)), "deleting a stream")
        except Gone:
            pass

    def control(self) -> Control:
        async def get() -> Control:
            try:
                raw = await self._js.get_last_msg(layout.control_stream(self.base), layout.control_subject(self.base))
            except nats.js.errors.NotFoundError:
                return Control()
            return Control.decode(raw.data or b"")
        try:
            return self._call(get(), "reading the control record")
        except ValueError as exc:
            raise Unreachable(f"reading the control record: {exc}") from exc

    def set_control(self, control: Control) -> None:
        self._call(self._js.publish(layout.control_subject(self.base), control.encode()), "writing the control record")

    def last_sequence(self, generation: int) -> int:
        async def info() -> int:
            return (await self._js.stream_info(layout.stream(self.base, generation))).state.last_seq
        return self._call(info(), "reading the stream's state")

    def publish(self, subject: str, data: bytes, msg_id: str, expected: int, kind: str | None = None) -> int:
        """One publish expecting the stream's last sequence to be ``expected``; its sequence."""
        headers = {api.Header.MSG_ID.value: msg_id, api.Header.EXPECTED_LAST_SEQUENCE.value: str(expected)}
        if kind is not None:
            headers[layout.KIND_HEADER] = kind
        ack = self._call(self._js.publish(subject, data, headers=headers, timeout=PUBLISH_TIMEOUT),
                         "publishing to the stream", PUBLISH_TIMEOUT + 0.5)
        return ack.seq

    def publish_all(self, items: list[tuple[str, bytes, str]], first_expected: int) -> int:
        """Publish ``(subject, data, msg_id)`` in order, each expecting the stream's last
        sequence to be the one before it (the first: ``first_expected``); the last sequence.
        The first goes alone — refused, nothing else is sent (a stale expectation could
        otherwise match further on) — then the rest pipelined.  Another node's event can
        still land among them if it was published right behind one of them: each is a
        fact of its own, and a command refused half way is run again (an import then adds
        what is missing).  (Not nats-py's ``publish_async``: an error answer raises inside
        its callback and leaves the publish waiting forever.)"""
        return self._call(self._pipelined(items, first_expected), "publishing to the stream",
                          PUBLISH_TIMEOUT + len(items) / 500)

    async def _pipelined(self, items: list[tuple[str, bytes, str]], first_expected: int) -> int:
        prefix, answers, done, first = self._nc.new_inbox(), dict[int, dict](), asyncio.Event(), asyncio.Event()

        async def on_answer(msg) -> None:
            index = int(msg.subject.rsplit(".", 1)[1])
            status = msg.headers.get(api.Header.STATUS.value) if msg.headers else None
            answers[index] = ({"error": {"code": int(status), "description": "no stream answered"}}
                              if status and not msg.data else json.loads(msg.data))
            if index == 0:
                first.set()
            if len(answers) == len(items):
                done.set()
        sub = await self._nc.subscribe(prefix + ".*", cb=on_answer)
        try:
            for i, (subject, data, msg_id) in enumerate(items):
                headers = {api.Header.MSG_ID.value: msg_id,
                           api.Header.EXPECTED_LAST_SEQUENCE.value: str(first_expected + i)}
                await self._nc.publish(subject, data, reply=f"{prefix}.{i}", headers=headers)
                if i == 0:         # the first alone: after a refusal nothing else goes out
                    await asyncio.wait_for(first.wait(), PUBLISH_TIMEOUT)
                    if "error" in answers[0]:
                        break
            if items and "error" not in answers[0]:
                await done.wait()
        finally:
            await sub.unsubscribe()
        for i in range(len(items)):                   # the first refusal is the one that counts
            error = answers.get(i, {}).get("error")
            if error:
                raise nats.js.errors.APIError(code=error.get("code"), err_code=error.get("err_code"),
                                              description=error.get("description"))
            if answers[i].get("seq") != first_expected + i + 1:
                raise Unreachable("publishing to the stream: an event was stored at an unexpected sequence")
        return first_expected + len(items)

    # ------------------------------------------------------------ following
    def follow(self, generation: int, start: int) -> None:
        """From now on deliver ``generation``'s messages from ``start`` on to ``on_records``."""
        async def restart() -> None:
            if self._follow_task is not None:
                self._follow_task.cancel()
            self._follow_task = asyncio.ensure_future(self._follow(generation, start))
        self._submit(restart()).result(CALL_TIMEOUT)

    async def _follow(self, generation: int, start: int) -> None:
        cursor = [start]                 # the next sequence to ask for, kept across consumers
        while True:
            try:
                if self._nc is None or not self.connected:
                    await asyncio.sleep(RETRY_WAIT)
                    continue
                await self._read_from(generation, cursor)
            except asyncio.CancelledError:
                raise
            except Exception as exc:          # gone, disconnected, leader lost: a new consumer
                log.debug("replication: following the stream failed (%s); retrying", exc)
                await asyncio.sleep(RETRY_WAIT)

    async def _read_from(self, generation: int, cursor: list[int]) -> None:
        """One consumer from ``cursor[0]`` on, pulled with plain requests into a callback:
        nats-py's ``fetch`` costs a task per message, which halves the catch-up speed."""
        stream = layout.stream(self.base, generation)
        config = api.ConsumerConfig(name=self._names.next().decode(),
                                    filter_subject=layout.root(self.base, generation) + ".>",
                                    deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=cursor[0],
                                    ack_policy=api.AckPolicy.NONE, inactive_threshold=30.0, num_replicas=1,
                                    mem_storage=True)
        consumer = (await self._js.add_consumer(stream, config=config)).name
        pull = _Pull(self, generation, cursor)
        sub = await self._nc.subscribe(self._nc.new_inbox(), cb=pull.on_msg)
        request = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        try:
            idle = 0
            while True:
                pull.begin(FETCH_BATCH)
                body = {"batch": FETCH_BATCH, "expires": int(FETCH_WAIT * 1e9)}
                await self._nc.publish(request, json.dumps(body).encode(), reply=sub.subject)
                await asyncio.wait_for(pull.done.wait(), FETCH_WAIT + CALL_TIMEOUT)
                pull.deliver()
                if pull.failed:
                    raise Unreachable(f"following the stream: {pull.failed}")
                idle = 0 if pull.count else idle + 1
                if idle and idle % IDLE_CHECK == 0:
                    await self._js.consumer_info(stream, consumer)    # raises when it or its stream is gone
        finally:
            try:
                await sub.unsubscribe()
                await self._js.delete_consumer(stream, consumer)
            except Exception:                         # the connection or the stream may be gone already
                pass

    # ------------------------------------------------------------ closing
    def close(self) -> None:
        async def shut() -> None:
            self._closing = True
            self._connector.cancel()
            if self._follow_task is not None:
                self._follow_task.cancel()
                await asyncio.gather(self._follow_task, return_exceptions=True)
            if self._client is not None:              # connected, or still connecting (its socket may be open)
                try:
                    await asyncio.wait_for(self._client.close(), 2.0)
                except Exception:                      # closing a dead connection: nothing to save
                    pass
        try:
            self._submit(shut()).result(5.0)
        except Exception:                              # the loop is stuck: the daemon thread dies with us
            log.warning("replication: the NATS client did not close in time")
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5.0)                         # the thread closes the loop (_serve_loop)


class _Pull:
    """The messages of one pull request, handed on in chunks as they arrive."""

    CHUNK = 1000

    def __init__(self, link: Link, generation: int, cursor: list[int]) -> None:
        self.link, self.generation, self.cursor = link, generation, cursor
        self.done = asyncio.Event()
        self.records: list[Record] = []
        self.count = self.want = 0
        self.failed = ""

    def begin(self, want: int) -> None:
        self.done.clear()
        self.count, self.want = 0, want

    async def on_msg(self, msg) -> None:
        if not msg.data and msg.headers and _STATUS in msg.headers:     # a seal has no data either
            self._ended(msg.headers[_STATUS], msg.headers.get(_DESCRIPTION, ""))
        else:
            self._take(_record(msg))

    def _ended(self, status: str, description: str) -> None:
        if status not in ("404", "408"):           # 404 no messages, 408 expired: the request ended
            self.failed = f"{status} {description}".strip()
        self.done.set()

    def _take(self, record: Record) -> None:
        if record.seq < self.cursor[0]:
            return
        self.records.append(record)
        self.cursor[0] = record.seq + 1
        self.count += 1
        if len(self.records) >= self.CHUNK:
            self.deliver()
        if self.count >= self.want:
            self.done.set()

    def deliver(self) -> None:
        if self.records:
            self.link._on_records(self.generation, self.records)
            self.records = []


_MSG_ID = api.Header.MSG_ID.value
_STATUS = api.Header.STATUS.value
_DESCRIPTION = api.Header.DESCRIPTION.value


def _record(msg) -> Record:
    """The record of a pulled message.  Its stream sequence, time and pending
    count are read from its reply subject, JetStream's acknowledgement subject
    (``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ns>.<pending>``,
    or the form with a domain and an account hash in front and a token after),
    as ``msg.metadata`` reads them but without its datetime and objects; a
    subject of another form is left to ``msg.metadata``.  This runs for every
    message of a catch-up, on the thread that also parses them: it is kept to
    one split and a tuple."""
    headers = msg.headers or {}
    tokens = msg.reply.split(".")
    n = len(tokens)
    if n == 9 and tokens[0] == "$JS" and tokens[1] == "ACK":
        seq, ns, left = tokens[5], tokens[7], tokens[8]
    elif (n == 11 or n == 12) and tokens[0] == "$JS" and tokens[1] == "ACK":
        seq, ns, left = tokens[7], tokens[9], tokens[10]
    else:
        md = msg.metadata
        return Record(md.sequence.stream, msg.subject, msg.data, headers.get(layout.KIND_HEADER),
                      headers.get(_MSG_ID), md.timestamp.timestamp(), md.num_pending)
    return Record(int(seq), msg.subject, msg.data, headers.get(layout.KIND_HEADER), headers.get(_MSG_ID),
                  int(ns) / 1e9, int(left))
