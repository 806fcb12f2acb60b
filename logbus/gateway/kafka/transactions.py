"""Kafka transactions (KIP-98): InitProducerId with a ``transactional.id``,
AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn, over the ``Streams``
port's transaction coordinator (core/streams/transactions.py). This broker is the
coordinator of every transactional id (FindCoordinator, groups.py, answers key type 1).

===================  ========  =========================================================
API                  versions  notes
===================  ========  =========================================================
InitProducerId       0-4       without a transactional id: handlers.py (idempotence)
AddPartitionsToTxn   0-3       v4+ (a broker's batch of transactions) is not offered
AddOffsetsToTxn      0-3
TxnOffsetCommit      0-3       v3: the consumer's generation and member checked as
                               OffsetCommit checks them (KIP-447: a zombie is fenced)
EndTxn               0-3       answered once the markers are durable and the outcome
                               applied (routed, or in the aborted-transaction index)
===================  ========  =========================================================

A producer's epoch older than its current one is PRODUCER_FENCED (90), and
INVALID_PRODUCER_EPOCH (47) to request versions before it existed, as Kafka answers. A
transactional id needs WRITE on it (access.py); each partition added, WRITE on its topic;
each group, READ on the group.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)

from ...core.types import Code, OffsetAndMetadata
from . import errors as K
from .caller import Caller
from .codec import Request
from .handlers import KafkaHandlers
from .operations import READ

TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
OPERATION_NOT_ATTEMPTED = 55


def install(handlers: KafkaHandlers) -> None:
    """Register this module's APIs with ``handlers`` (InitProducerId replaces the
    idempotent-only handler, which it calls without a transactional id)."""
    api = _TxnApi(handlers)
    reg = handlers.register
    reg(InitProducerIdRequest, InitProducerIdResponse, 0, 4, api.init_producer_id)
    reg(AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 0, 3, api.add_partitions)
    reg(AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, 0, 3, api.add_offsets)
    reg(TxnOffsetCommitRequest, TxnOffsetCommitResponse, 0, 3, api.txn_offset_commit)
    reg(EndTxnRequest, EndTxnResponse, 0, 3, api.end_txn)


def _code(code: Code, version: int, fenced_from: int = 2) -> int:
    if code is Code.PRODUCER_FENCED and version < fenced_from:
        return K.INVALID_PRODUCER_EPOCH
    return K.group_error(code)


class _TxnApi:
    def __init__(self, handlers: KafkaHandlers) -> None:
        self.handlers = handlers
        self.streams = handlers.streams
        self.access = handlers.access

    def _may(self, caller: Caller, txn_id: str) -> bool:
        return self.access.transactional_id(caller.user, txn_id)

    def init_producer_id(self, req: Request, caller: Caller) -> Any:
        body, v = req.body, req.api_version
        txn_id = body.transactional_id
        if txn_id is None:
            return self.handlers.init_producer_id(req, caller)
        if not self._may(caller, txn_id):
            return InitProducerIdResponse(throttle_time_ms=0, error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                          producer_id=-1, producer_epoch=-1)
        pid = body.producer_id if v >= 3 else -1
        epoch = body.producer_epoch if v >= 3 else -1

        def answer(result: tuple[Code, int, int]) -> Any:
            code, pid, epoch = result
            return InitProducerIdResponse(throttle_time_ms=0, error_code=_code(code, v, 4),
                                          producer_id=pid, producer_epoch=epoch)

        return self.streams.init_transactional_producer(txn_id, body.transaction_timeout_ms, pid,
                                                        epoch).addCallback(answer)

    def add_partitions(self, req: Request, caller: Caller) -> Any:
        body, v = req.body, req.api_version
        txn_id = body.v3_and_below_transactional_id
        wanted = [(t.name, p) for t in body.v3_and_below_topics for p in t.partitions]
        if not self._may(caller, txn_id):
            codes = {tp: TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in wanted}
        else:
            refused = {tp for tp in wanted if not self.handlers.allowed(caller.user, "write", tp[0])}
            if refused:
                codes = {tp: K.TOPIC_AUTHORIZATION_FAILED if tp in refused else OPERATION_NOT_ATTEMPTED
                         for tp in wanted}
            else:
                code, per = self.streams.add_partitions_to_txn(txn_id, body.v3_and_below_producer_id,
                                                               body.v3_and_below_producer_epoch, wanted)
                if code is Code.UNKNOWN_TOPIC_OR_PARTITION:
                    codes = {tp: K.UNKNOWN_TOPIC_OR_PARTITION if c is not Code.NONE else OPERATION_NOT_ATTEMPTED
                             for tp, c in per.items()}
                else:
                    codes = {tp: _code(c, v) for tp, c in per.items()}
        R = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
        P = R.AddPartitionsToTxnPartitionResult
        by_topic: dict[str, list[Any]] = {}
        for (topic, index), error in codes.items():
            by_topic.setdefault(topic, []).append(P(partition_index=index, partition_error_code=error))
        return AddPartitionsToTxnResponse(
            throttle_time_ms=0,
            results_by_topic_v3_and_below=[R(name=name, results_by_partition=parts) for name, parts in by_topic.items()])

    def add_offsets(self, req: Request, caller: Caller) -> Any:
        body, v = req.body, req.api_version
        if not self._may(caller, body.transactional_id):
            code = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif not self.access.group(caller.user, READ, body.group_id):
            code = K.GROUP_AUTHORIZATION_FAILED
        else:
            code = _code(self.streams.add_offsets_to_txn(body.transactional_id, body.producer_id,
                                                         body.producer_epoch, body.group_id), v)
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=code)

    def txn_offset_commit(self, req: Request, caller: Caller) -> Any:
        body, v = req.body, req.api_version
        offsets = {
            (t.name, p.partition_index): OffsetAndMetadata(
                p.committed_offset, p.committed_metadata,
                p.committed_leader_epoch if v >= 2 else -1)
            for t in body.topics for p in t.partitions
        }
        if not self._may(caller, body.transactional_id):
            codes = dict.fromkeys(offsets, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        elif not self.access.group(caller.user, READ, body.group_id):
            codes = dict.fromkeys(offsets, K.GROUP_AUTHORIZATION_FAILED)
        else:
            refused = {tp for tp in offsets if not self.access.topic(caller.user, READ, tp[0])}
            allowed = {tp: om for tp, om in offsets.items() if tp not in refused}
            result = K.NONE
            if allowed:
                member = (body.generation_id, body.member_id or "", body.group_instance_id) if v >= 3 else (-1, "", None)
                result = _code(self.streams.txn_commit_offsets(body.transactional_id, body.group_id,
                                                               body.producer_id, body.producer_epoch, allowed,
                                                               *member), v)
            codes = {tp: K.TOPIC_AUTHORIZATION_FAILED if tp in refused else result for tp in offsets}
        T = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
        P = T.TxnOffsetCommitResponsePartition
        by_topic: dict[str, list[Any]] = {}
        for (topic, index), error in codes.items():
            by_topic.setdefault(topic, []).append(P(partition_index=index, error_code=error))
        return TxnOffsetCommitResponse(throttle_time_ms=0,
                                       topics=[T(name=name, partitions=parts) for name, parts in by_topic.items()])

    def end_txn(self, req: Request, caller: Caller) -> Any:
        body, v = req.body, req.api_version
        if not self._may(caller, body.transactional_id):
            return EndTxnResponse(throttle_time_ms=0, error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED)

        def answer(code: Code) -> Any:
            return EndTxnResponse(throttle_time_ms=0, error_code=_code(code, v))

        return self.streams.end_txn(body.transactional_id, body.producer_id, body.producer_epoch,
                                    bool(body.committed)).addCallback(answer)
