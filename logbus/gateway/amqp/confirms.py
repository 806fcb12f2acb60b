"""Publisher confirms of one AMQP channel (confirm.select), as a pure tracker: which
publishes are settled, and what to tell the client, in as few acks as possible.

The channel (publishing.py) numbers its publishes from 1 and reports each once it is
durable (``ok``, ``ok_range``) or refused (``failed``). A refusal is told at once, and
only once, as a nack of that number: ``failed`` returns True when the channel must send
it. Acks are coalesced: when ``ok``/``ok_range``/``failed`` return True, the channel
calls ``flush`` once at the end of its reactor tick, which returns the one ack to send,
``(n, multiple)``: ``multiple`` up to ``n``, the highest number below which every
publish is settled and the last of them that was not nacked. A publish settled past a
gap (an earlier one not yet durable) waits for the gap to close.

No I/O, no channel: the tracker holds numbers only; on the hot path ``ok_range`` of the
next numbers to settle is O(1).
"""

from __future__ import annotations


class Confirms:
    __slots__ = ("upto", "sent", "last_ok", "settled", "nacked")

    def __init__(self) -> None:
        self.upto = 0  # everything <= upto is settled (durable or nacked)
        self.sent = 0  # everything <= sent was acked or nacked to the client
        self.last_ok = 0  # the highest seq <= upto settled as durable
        self.settled: set[int] = set()  # settled seqs above upto
        self.nacked: set[int] = set()  # nacked seqs above upto (also in settled)

    def ok(self, seq: int) -> bool:
        """``seq`` is durable; True when a flush is due."""
        if seq > self.upto and seq not in self.nacked:
            self.settled.add(seq)
            return True
        return False

    def ok_range(self, first: int, last: int) -> bool:
        """``ok`` for ``first..last``; O(1) when they are the next to settle."""
        if first == self.upto + 1 and not self.settled:
            self.upto = self.last_ok = last
            return True
        due = False
        for seq in range(first, last + 1):
            due = self.ok(seq) or due
        return due

    def failed(self, seq: int) -> bool:
        """``seq`` was refused; True when it is to be nacked now (and a flush is due)."""
        if seq > self.upto and seq not in self.nacked:
            self.nacked.add(seq)
            self.settled.add(seq)
            return True
        return False

    def flush(self) -> tuple[int, bool] | None:
        """The ack to send now, ``(seq, multiple)``, or None."""
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
        last_ok = self.last_ok
        if last_ok >= first:
            return last_ok, last_ok > first
        return None
