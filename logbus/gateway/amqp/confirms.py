"""Publisher confirms of one AMQP channel (confirm.select): which publishes are durable,
told to the client as few acks as possible."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .fastpath import encode_ack, encode_nack

if TYPE_CHECKING:
    from .channel import Channel


class Confirms:
    """Publisher confirms of one channel. Acks are collected per reactor tick and sent
    as ONE ack, ``multiple`` up to the highest sequence number below which everything
    is settled (durable, or nacked); a nack goes out at once and only once."""

    __slots__ = ("ch", "upto", "sent", "last_ok", "settled", "nacked", "scheduled")

    def __init__(self, ch: Channel) -> None:
        self.ch = ch
        self.upto = 0  # everything <= upto is settled (durable or nacked)
        self.sent = 0  # everything <= sent was acked or nacked to the client
        self.last_ok = 0  # the highest seq <= upto settled as durable
        self.settled: set[int] = set()  # settled seqs above upto
        self.nacked: set[int] = set()
        self.scheduled = False

    def ok(self, seq: int) -> None:
        if seq > self.upto and seq not in self.nacked:
            self.settled.add(seq)
            self._schedule()

    def ok_range(self, first: int, last: int) -> None:
        """``ok`` for ``first..last``; O(1) when they are the next to settle."""
        if first == self.upto + 1 and not self.settled:
            self.upto = self.last_ok = last
            self._schedule()
        else:
            for seq in range(first, last + 1):
                self.ok(seq)

    def failed(self, seq: int) -> None:
        if seq > self.upto and seq not in self.nacked:
            self.nacked.add(seq)
            self.settled.add(seq)
            ch = self.ch
            if not ch.closing and ch.conn.open:
                ch.conn.send(encode_nack(ch.number, seq))
            self._schedule()

    def _schedule(self) -> None:
        if not self.scheduled:
            self.scheduled = True
            self.ch.conn.tick.later(self.flush)

    def flush(self) -> None:
        self.scheduled = False
        upto, settled, nacked = self.upto, self.settled, self.nacked
        while upto + 1 in settled:
            upto += 1
            settled.discard(upto)
            if upto in nacked:
                nacked.discard(upto)
            else:
                self.last_ok = upto
        first = self.sent + 1
        self.upto = self.sent = upto
        last_acked = self.last_ok
        ch = self.ch
        if last_acked >= first and not ch.closing and ch.conn.open:
            ch.conn.send(encode_ack(ch.number, last_acked, last_acked > first))
