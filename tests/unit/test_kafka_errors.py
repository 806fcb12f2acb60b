"""The core's errors as Kafka error codes (gateway/kafka/errors.py): an error the core
marks ``retriable`` reaches a Kafka client as a code it retries, whether or not it has a
code of its own."""

from __future__ import annotations

import pytest

from logbus.core import errors as E
from logbus.gateway.kafka.errors import KAFKA_STORAGE_ERROR, RETRIABLE, UNKNOWN_SERVER_ERROR, code_for


def every_error_class() -> list[type[E.LogbusError]]:
    out, todo = [], [E.LogbusError]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo += cls.__subclasses__()
    return out


@pytest.mark.parametrize("cls", every_error_class(), ids=lambda c: c.__name__)
def test_a_retriable_core_error_is_a_retriable_kafka_code(cls: type[E.LogbusError]) -> None:
    error = cls.__new__(cls)  # the class decides the code; no constructor arguments needed
    if cls.retriable:
        assert code_for(error) in RETRIABLE


def test_an_error_without_a_code_of_its_own_goes_by_its_flag() -> None:
    class Passing(E.LogbusError):
        code = "passing"
        retriable = True

    class Lasting(E.LogbusError):
        code = "lasting"

    assert code_for(Passing("disk busy")) == KAFKA_STORAGE_ERROR
    assert code_for(Lasting("no")) == UNKNOWN_SERVER_ERROR
    assert code_for(ValueError("not ours")) == UNKNOWN_SERVER_ERROR
    assert E.StorageError.retriable and code_for(E.StorageError("eio")) == KAFKA_STORAGE_ERROR
