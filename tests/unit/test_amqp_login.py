"""The AMQP handshake's login and vhost checks, sans I/O: client frames fed to a
``Session`` over a real broker (temp dir), the server's frames read back. Here a peer
can claim to be remote, which a loopback integration test cannot: ``loopback_users``."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pamqp import commands as C
from pamqp import encode, frame

from logbus.gateway.amqp.model.forms import AMQP_FORMS
from logbus.core.broker import Broker
from logbus.core.log import TopicConfig
from logbus.gateway.amqp.session import Session
from tests.loop import LoopReactor

HEADER = b"AMQP\x00\x00\x09\x01"


class Env:
    def __init__(self, tmp: Path, **broker_kw: Any) -> None:
        self.loop = LoopReactor()
        self.broker = Broker(tmp, reactor=self.loop, forms=AMQP_FORMS, topic_defaults=TopicConfig(flush="none"), **broker_kw)
        self.broker.start()

    def login(self, user: str, password: str, vhost: str = "/", *, loopback: bool = True,
              mechanism: str = "PLAIN", before_open: Any = None) -> Any:
        """The handshake; the server's last method: Connection.OpenOk or Connection.Close."""
        out: list[bytes] = []
        conn = Session(self.broker.doors, self.broker.queue_model, send=out.append, close=lambda: None,
                       reading=lambda on: None, reactor=self.loop, peer_is_loopback=loopback, peer="test")
        if mechanism == "PLAIN":
            response = f"\0{user}\0{password}"
        else:  # AMQPLAIN: a field table without its length prefix
            table = encode.field_table({"LOGIN": user, "PASSWORD": password})
            response = table[struct.calcsize(">I"):].decode("latin-1")
        for data in (HEADER, frame.marshal(C.Connection.StartOk({}, mechanism, response), 0),
                     frame.marshal(C.Connection.TuneOk(2047, 131072, 0), 0)):
            conn.data_received(data)
        if before_open is not None:
            before_open()
        conn.data_received(frame.marshal(C.Connection.Open(vhost), 0))
        self.loop.run_until(lambda: self.broker.password_worker.pending == 0)  # the password thread
        while self.loop.run_once():
            pass
        methods = []
        data = b"".join(out)
        while data:
            used, _, f = frame.unmarshal(data)
            data = data[used:]
            methods.append(f)
        conn.connection_lost()
        return methods[-1]

    def close(self) -> None:
        self.broker.stop()
        while self.loop.run_once():
            pass


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    e.close()


def closed(method: Any, code: int, text: str) -> None:
    assert isinstance(method, C.Connection.Close), method
    assert (method.reply_code, method.reply_text) == (code, text)


def test_loopback_users_only_from_loopback(env: Env) -> None:
    assert isinstance(env.login("guest", "guest"), C.Connection.OpenOk)
    closed(env.login("guest", "guest", loopback=False), 403,
           "ACCESS_REFUSED - user 'guest' can only connect via localhost")
    env.broker.access.put_user("alice", password="pw")
    env.broker.access.set_permission("alice", "/", ".*", ".*", ".*")
    assert isinstance(env.login("alice", "pw", loopback=False), C.Connection.OpenOk)
    assert isinstance(env.login("alice", "pw", mechanism="AMQPLAIN"), C.Connection.OpenOk)
    closed(env.login("alice", "nope", loopback=False), 403, "ACCESS_REFUSED - Login was refused using "
           "authentication mechanism PLAIN. For details see the broker logfile.")


def test_loopback_users_is_a_setting(tmp_path: Path) -> None:
    env = Env(tmp_path, default_user="admin", default_pass="pw", loopback_users=["admin"])
    try:
        closed(env.login("admin", "pw", loopback=False), 403,
               "ACCESS_REFUSED - user 'admin' can only connect via localhost")
    finally:
        env.close()
    env = Env(tmp_path, loopback_users=())  # the data dir keeps its first boot's admin
    try:
        assert isinstance(env.login("admin", "pw", loopback=False), C.Connection.OpenOk)
    finally:
        env.close()


def test_vhost_checks_at_connection_open(env: Env) -> None:
    env.broker.admin.create_vhost("v")
    closed(env.login("guest", "guest", "v"), 530, "NOT_ALLOWED - access to vhost 'v' refused for user 'guest'")
    closed(env.login("guest", "guest", "w"), 530, "NOT_ALLOWED - vhost w not found")
    env.broker.access.set_permission("guest", "v", "", "", "")  # any permission lets one in
    assert isinstance(env.login("guest", "guest", "v"), C.Connection.OpenOk)

    def create_w() -> None:  # after the connection got the broker's mapping, before Open
        env.broker.admin.create_vhost("w")
        env.broker.access.set_permission("guest", "w", ".*", ".*", ".*")

    assert isinstance(env.login("guest", "guest", "w", before_open=create_w), C.Connection.OpenOk)
