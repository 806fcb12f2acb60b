"""A channel's publishing: basic.publish one at a time or as a run of one read, the
mandatory flag's basic.return, and publisher confirms, for ``Channel`` (channel.py) as the
``Publishing`` mixin.

In confirm mode every publish gets a sequence number and is acked once its record is
durable (nacked when a queue refuses it under x-overflow reject-publish); the acks of
one reactor tick go out as one (confirms.py). In tx mode publishes wait for
``tx.commit``. The write permission on the exchange is cached per exchange
(``writable``) while ``access.version`` stays what it was, so a publish costs one
comparison and one set lookup, never a regular expression.
"""

from __future__ import annotations

from typing import Any

from ...core.types import Resource
from ...core.errors import Refused
from ...core.types import HALF_TARGET_HEADER, HALVES_TOPIC, TOPIC
from .confirms import Confirms
from .declarations import Declarations
from .errors import NO_ROUTE, AMQPChannelError, refused
from .events import Publish
from .fastpath import encode_ack, encode_nack, encode_return
from .mapping import to_message
from .model.translate import message_delay


class Publishing(Declarations):
    """The publishing side of ``Channel``: permission cache, publishes, confirms."""

    # the Channel's own, set in Channel.__init__ (Consuming and Declarations declare the rest)
    confirm: bool
    publish_seq: int
    confirms: Confirms
    confirms_due: bool  # a flush of the confirms is scheduled for this tick
    writable: set[str]  # exchanges basic.publish was allowed to write to...
    writable_version: int  # ...as of this access.version (another: check again)


    def _check_write(self, exchange: str, routing_key: str) -> None:
        """basic.publish's permission check, remembered in ``writable`` until the
        permissions change; a topic exchange the user has a topic permission on is checked
        for each routing key instead (RabbitMQ's topic authorisation)."""
        if self.writable_version != self.doors.access_version:
            self.writable.clear()
            self.writable_version = self.doors.access_version
        try:
            if self._topic_restricted(exchange):
                self.doors.authorize(self.conn.user, "write",
                                      Resource(self.vhost.name, "exchange", exchange, routing_key))
                return
            self._permit("write", "exchange", exchange)
        except Refused as e:
            raise refused(e, channel=self.number,
                                   class_id=60, method_id=40) from None
        self.writable.add(exchange)

    def _topic_restricted(self, exchange: str) -> bool:
        v = self.vhost
        return (self.doors.topic_restricted(self.conn.user, v.name, exchange)
                and v.has_exchange(exchange) and v.exchange(exchange).kind == TOPIC)

    def _check_half(self, p: Publish) -> None:
        """A half message published to the exchange ``logbus.halves`` (docs/transactions.md):
        403 unless the user may also write the topic a commit publishes it to."""
        for name, value in to_message(p).headers:
            if name == HALF_TARGET_HEADER and value is not None:
                try:
                    self.doors.authorize_topic(self.conn.user, "write", value.decode("utf-8", "replace"))
                except Refused as e:
                    raise refused(e, channel=self.number, class_id=60, method_id=40) from None

    def publish(self, p: Publish) -> None:
        if self.writable_version != self.doors.access_version or p.exchange not in self.writable:
            self._check_write(p.exchange, p.routing_key)  # 403 unless the user may write to the exchange
        if p.exchange == HALVES_TOPIC:
            self._check_half(p)
        if self.tx is not None:
            self.tx.append(lambda: self._publish(p, None))
            return
        seq = 0
        if self.confirm:
            self.publish_seq += 1
            seq = self.publish_seq
        self._publish(p, seq)

    def publish_many(self, run: list[Publish]) -> None:
        """Consecutive basic.publish of one read on this channel: as ``publish`` each, in
        order, with the Python work shared (one pipeline batch). A publish that fails
        closes the channel after the ones before it were published."""
        if self.tx is not None:
            for p in run:
                self.publish(p)
            return
        error: AMQPChannelError | None = None
        writable = self.writable
        if self.writable_version != self.doors.access_version or any(p.exchange not in writable for p in run):
            for i, p in enumerate(run):
                try:
                    self._check_write(p.exchange, p.routing_key)
                except AMQPChannelError as e:
                    run, error = run[:i], e
                    break
        if HALVES_TOPIC in writable:  # a half message among them: its target's permission too
            for i, p in enumerate(run):
                if p.exchange == HALVES_TOPIC:
                    try:
                        self._check_half(p)
                    except AMQPChannelError as e:
                        run, error = run[:i], e
                        break
        if run:
            self._publish_many(run)
        if error is not None:
            raise error

    def _publish_many(self, run: list[Publish]) -> None:
        on_durable = None
        if self.confirm:
            seq0 = self.publish_seq + 1
            self.publish_seq += len(run)
            confirms = self.confirms

            def on_durable(first: int, last: int, result: Any) -> None:
                if isinstance(result, Exception):
                    for seq in range(seq0 + first, seq0 + last + 1):
                        self.confirm_failed(seq)
                else:
                    if self.conn.record is not None:
                        self.conn.record.confirmed += last - first + 1
                    if confirms.ok_range(seq0 + first, seq0 + last) and not self.confirms_due:
                        self._confirms_due()

        out = self.vhost.publish([to_message(p) for p in run], on_durable, delay_of=message_delay)
        if self.conn.record is not None:
            self.conn.record.received += out.done
        for i in out.unrouted:
            p = run[i]
            if p.mandatory:
                self.conn.send(encode_return(self.number, NO_ROUTE, "NO_ROUTE", p.exchange, p.routing_key,
                                             p.raw_properties, p.body, self.conn.frame_max))
        if out.refused and self.confirm:
            for i in out.refused:
                self.confirm_failed(seq0 + i)
        if out.error is not None:
            e = out.error
            if self.confirm:
                self.publish_seq = seq0 + out.done - 1  # the failed one and those after it were never numbered
            raise refused(e, channel=self.number,
                                   class_id=60, method_id=40)

    def _publish(self, p: Publish, seq: int | None) -> None:
        message = to_message(p)
        if self.conn.record is not None:
            self.conn.record.received += 1
        confirms = self.confirms

        def durable(first: int, last: int, result: Any) -> None:
            if isinstance(result, Exception):
                self.confirm_failed(seq or 0)
            else:
                if self.conn.record is not None:
                    self.conn.record.confirmed += 1
                if confirms.ok(seq or 0) and not self.confirms_due:
                    self._confirms_due()

        out = self.vhost.publish([message], durable if seq else None, delay_of=message_delay)
        if out.error is not None:
            raise refused(out.error, channel=self.number, class_id=60, method_id=40)
        if not out.routed and p.mandatory:
            self.conn.send(encode_return(self.number, NO_ROUTE, "NO_ROUTE", p.exchange, p.routing_key,
                                         p.raw_properties, p.body, self.conn.frame_max))
        if out.refused and seq:
            self.confirm_failed(seq)

    def confirm_failed(self, seq: int) -> None:
        """Publish ``seq`` was refused: nack it now (once)."""
        if self.confirms.failed(seq):
            if not self.closing and self.conn.open:
                self.conn.send(encode_nack(self.number, seq))
            if not self.confirms_due:
                self._confirms_due()

    def _confirms_due(self) -> None:
        self.confirms_due = True
        self.conn.tick.later(self._flush_confirms)

    def _flush_confirms(self) -> None:
        """The end of the tick: the one ack that covers what settled during it."""
        self.confirms_due = False
        ack = self.confirms.flush()
        if ack is not None and not self.closing and self.conn.open:
            self.conn.send(encode_ack(self.number, ack[0], ack[1]))
