"""One AMQP channel: the class methods a client sends on it, answered against a vhost.

``Channel`` holds the channel's state, dispatches each method through ``_HANDLERS`` and
carries out the modes (confirm, tx, flow) and closing; the methods themselves are in
three bases, one inheriting the next (mypyc compiles single inheritance only):
``Consuming`` (consumers.py: basic.qos / consume / cancel / get, deliveries, acks, nacks,
rejects, recover), ``Declarations`` (declarations.py: exchange.* and queue.*) and
``Publishing`` (publishing.py: basic.publish, basic.return, publisher confirms). In tx
mode publishes and settlements wait for ``tx.commit``.

Refusals of the broker's model (``core.errors.Refused``, as 404, 403, 405, 406) close the channel
with that reply code; the connection (connection.py, through session.py) sends the Channel.Close and
discards what arrives on the channel until Close-Ok.

Permissions (``core.access.auth``) are checked as RabbitMQ does, before the operation: configure
on the exchange or queue declared or deleted, write on the destination and read on the
source of a binding, write on the exchange of basic.publish, read on the queue of
basic.get / consume and queue.purge; a denial is 403 ACCESS_REFUSED. The publish check
is cached per exchange (publishing.py).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable

from pamqp import base
from pamqp import commands as C

from ...core.types import Kind, Perm, Resource
from ...core.errors import Refused
from ...core.types import Delivery
from .confirms import Confirms
from .consumers import ChannelConsumer
from .errors import COMMAND_INVALID, NOT_IMPLEMENTED, PRECONDITION_FAILED, AMQPChannelError, AMQPConnectionError, refused
from ...core.ports import Queues
from .publishing import Publishing

if TYPE_CHECKING:
    from .session import Session


class Channel(Publishing):
    def __init__(self, conn: Session, number: int) -> None:
        self.conn = conn
        self.number = number
        vhost = conn.vhost
        assert vhost is not None, "channels are opened after connection.open"
        self.vhost: Queues = vhost  # the vhost's queue model
        self.active = True  # channel.flow
        self.closing = False  # we sent Channel.Close; waiting for Close-Ok
        self.prefetch = 0  # per consumer (basic.qos global=false)
        self.global_prefetch = 0
        self.consumers: dict[str, ChannelConsumer] = {}
        self.unacked: OrderedDict[int, Delivery] = OrderedDict()  # delivery tag -> what it delivered
        self.next_tag = 1
        self.confirm = False
        self.publish_seq = 0
        self.confirms = Confirms()
        self.confirms_due = False  # a flush of the confirms is scheduled for this tick
        self.tx: list[Callable[[], None]] | None = None  # pending operations in tx mode
        self.queues_touched: set[str] = set()
        self.doors = conn.doors
        self.writable: set[str] = set()  # exchanges basic.publish was allowed to write to...
        self.writable_version = -1  # ...as of this access.version (another: check again)

    # -- dispatch of methods ------------------------------------------------------------

    def method(self, m: base.Frame) -> None:
        handler = _HANDLERS.get(type(m))
        if handler is None:
            if m.name.startswith(("Connection.", "Channel.")):
                raise AMQPConnectionError(COMMAND_INVALID, f"unexpected {m.name} on channel {self.number}",
                                          channel=self.number)
            raise AMQPConnectionError(NOT_IMPLEMENTED, f"{m.name} is not implemented", channel=self.number)
        try:
            handler(self, m)
        except Refused as e:
            raise refused(e, channel=self.number,
                                   class_id=m.index >> 16, method_id=m.index & 0xFFFF) from None

    def _reply(self, m: base.Frame) -> None:
        self.conn.send_method(self.number, m)

    def _permit(self, perm: Perm, kind: Kind, name: str) -> None:
        """AccessRefused (403, closes the channel) unless the user may do ``perm`` on the
        resource; the default exchange is ``amq.default`` here, as in RabbitMQ."""
        self.doors.authorize(self.conn.user, perm, Resource(self.vhost.name, kind, name))

    def _owned(self, queue: str, class_id: int, method_id: int) -> None:
        """RESOURCE_LOCKED for another connection's exclusive queue."""
        qs = self.vhost.queue(queue)
        if qs.exclusive is not None and qs.exclusive is not self.conn:
            raise AMQPChannelError(405, f"cannot obtain exclusive access to locked queue '{queue}' in vhost "
                                   f"'{self.vhost.name}'. It could be originally declared on another connection "
                                   "or the exclusive property value does not match that of the original "
                                   "declaration.", channel=self.number, class_id=class_id, method_id=method_id)

    # -- confirm, tx, flow -------------------------------------------------------------------------

    def _confirm_select(self, m: C.Confirm.Select) -> None:
        if self.tx is not None:
            raise AMQPChannelError(PRECONDITION_FAILED, "cannot switch from tx to confirm mode",
                                   channel=self.number, class_id=85, method_id=10)
        self.confirm = True
        if not m.nowait:
            self._reply(C.Confirm.SelectOk())

    def _tx_select(self, m: C.Tx.Select) -> None:
        if self.confirm:
            raise AMQPChannelError(PRECONDITION_FAILED, "cannot switch from confirm to tx mode",
                                   channel=self.number, class_id=90, method_id=10)
        if self.tx is None:
            self.tx = []
        self._reply(C.Tx.SelectOk())

    def _tx_commit(self, m: C.Tx.Commit) -> None:
        if self.tx is None:
            raise AMQPChannelError(PRECONDITION_FAILED, "channel is not transactional", channel=self.number,
                                   class_id=90, method_id=20)
        ops, self.tx = self.tx, []
        for op in ops:
            op()
        self._reply(C.Tx.CommitOk())

    def _tx_rollback(self, m: C.Tx.Rollback) -> None:
        if self.tx is None:
            raise AMQPChannelError(PRECONDITION_FAILED, "channel is not transactional", channel=self.number,
                                   class_id=90, method_id=30)
        self.tx = []
        self._reply(C.Tx.RollbackOk())

    def _flow(self, m: C.Channel.Flow) -> None:
        self.active = bool(m.active)
        self._reply(C.Channel.FlowOk(self.active))
        if self.active:
            for q in {c.queue for c in self.consumers.values()}:
                self.vhost.dispatch(q)

    # -- closing ----------------------------------------------------------------------------------------

    def close(self) -> None:
        """The channel ends (Close, Close-Ok, or the connection went): cancel its
        consumers and requeue what it holds, in order."""
        for c in list(self.consumers.values()):
            self.vhost.cancel(c.queue, c)
        self.consumers.clear()
        self.tx = None
        self.requeue_all()


_HANDLERS: dict[type, Callable[[Channel, Any], None]] = {
    C.Exchange.Declare: Channel._exchange_declare,
    C.Exchange.Delete: Channel._exchange_delete,
    C.Exchange.Bind: Channel._exchange_bind,
    C.Exchange.Unbind: Channel._exchange_unbind,
    C.Queue.Declare: Channel._queue_declare,
    C.Queue.Bind: Channel._queue_bind,
    C.Queue.Unbind: Channel._queue_unbind,
    C.Queue.Purge: Channel._queue_purge,
    C.Queue.Delete: Channel._queue_delete,
    C.Basic.Qos: Channel._basic_qos,
    C.Basic.Consume: Channel._basic_consume,
    C.Basic.Cancel: Channel._basic_cancel,
    C.Basic.Get: Channel._basic_get,
    C.Basic.Recover: Channel._basic_recover,
    C.Basic.RecoverAsync: Channel._basic_recover,
    C.Confirm.Select: Channel._confirm_select,
    C.Tx.Select: Channel._tx_select,
    C.Tx.Commit: Channel._tx_commit,
    C.Tx.Rollback: Channel._tx_rollback,
    C.Channel.Flow: Channel._flow,
}
