#!/usr/bin/env python3
"""The MQTT brokers bench/mqtt_bench.py compares logbus with, each started here from its
installed package on 127.0.0.1 and a free port, its config, data and log in a temp dir,
and stopped by the pid we started (SIGTERM, SIGKILL after a grace period) -- nothing
else on the machine is touched (not Debian's mosquitto service, not /etc/mosquitto).

    Mosquitto   Debian's mosquitto (apt-get install -y mosquitto), run in the foreground as
                `mosquitto -c <our config>`: one listener 127.0.0.1:PORT, allow_anonymous
                true, persistence false, no log file (stdout, into the temp dir), and
                max_queued_messages 0 (the default of 1000 per client drops QoS 1 messages
                a slower subscriber has not taken yet; max_connections and memory_limit
                are left unset, i.e. unlimited)
    Amqtt       amqtt's broker from PyPI (pip install amqtt), `python -m
                amqtt.scripts.broker_script -c <our yaml>` (what its `amqtt` command runs)
                with this interpreter: one tcp listener 127.0.0.1:PORT and only
                AnonymousAuthPlugin (allow_anonymous: true) -- no $SYS, no packet logger

Ready means: a TCP connection to the port answers an MQTT 3.1.1 CONNECT with a CONNACK
that accepts it (``mqtt_answers``; mqtt_bench.py uses it on logbus too).

    python bench/mqtt_peers.py mosquitto   # start one, print {"port", "pid", ...}, stop on Ctrl-C
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Self

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import BenchError, StartStop, free_ports, tail

HOST = "127.0.0.1"
# CONNECT, MQTT 3.1.1, clean session, keep-alive 10 s, client id "mqtt-bench-probe"
_PROBE_ID = b"mqtt-bench-probe"
_VARIABLE = b"\x00\x04MQTT\x04\x02\x00\x0a" + len(_PROBE_ID).to_bytes(2, "big") + _PROBE_ID
CONNECT = bytes([0x10, len(_VARIABLE)]) + _VARIABLE
DISCONNECT = b"\xe0\x00"


def mqtt_answers(port: int, timeout: float = 2.0) -> str | None:
    """None if 127.0.0.1:``port`` accepts an MQTT 3.1.1 CONNECT (CONNACK, return code 0);
    otherwise what happened instead, in words."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as s:
            s.sendall(CONNECT)
            head = b""
            while len(head) < 4:  # CONNACK: 0x20 0x02 flags return-code
                chunk = s.recv(4 - len(head))
                if not chunk:
                    return f"the connection was closed after {len(head)} bytes of an answer"
                head += chunk
            try:
                s.sendall(DISCONNECT)
            except OSError:
                pass
    except TimeoutError:
        return f"no CONNACK within {timeout:g} s"
    except OSError as exc:
        return f"{exc.strerror or exc!r}"
    if head[:2] != b"\x20\x02":
        return f"not a CONNACK: {head.hex()}"
    if head[3] != 0:
        return f"CONNACK refused the connection (return code {head[3]})"
    return None


class PeerBroker(StartStop):
    """Context manager: ``with Mosquitto() as b: b.port, b.pid``. Subclasses write the
    config and give the command line."""

    name = ""

    def __init__(self, directory: str | None = None, start_timeout: float = 30.0,
                 stop_timeout: float = 15.0) -> None:
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.workdir = tempfile.mkdtemp(prefix=f"logbus-{self.name}-", dir=directory)
        self.log = os.path.join(self.workdir, "broker.log")
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.cmd: list[str] = []

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def command(self) -> list[str]:
        raise NotImplementedError

    def version(self) -> str:
        raise NotImplementedError

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "host": HOST, "port": self.port, "pid": self.pid,
                "version": self.version(), "command": self.cmd}

    def start(self) -> Self:
        (self.port,) = free_ports(1)
        self.cmd = self.command()
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                         cwd=self.workdir, start_new_session=True)  # Ctrl-C: us
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self.proc.poll() is not None:
                raise BenchError(f"{self.name} exited ({self.proc.returncode}) while starting; "
                                 f"its log:\n{tail(self.log)}")
            why = mqtt_answers(self.port)
            if why is None:
                return self
            if time.monotonic() > deadline:
                raise BenchError(f"{self.name} did not accept MQTT on {HOST}:{self.port} within "
                                 f"{self.start_timeout:g} s ({why}); its log:\n{tail(self.log)}")
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM to the process we started (its Popen), SIGKILL after the grace period."""
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(self.stop_timeout)
                except subprocess.TimeoutExpired:
                    print(f"mqtt_peers: {self.name} {self.proc.pid} ignored SIGTERM for "
                          f"{self.stop_timeout:g} s, killed", file=sys.stderr)
                    self.proc.kill()
                    self.proc.wait(10)
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)


class Mosquitto(PeerBroker):
    name = "mosquitto"

    def command(self) -> list[str]:
        # /usr/sbin: not on every user's PATH
        exe = shutil.which("mosquitto") or shutil.which("mosquitto", path="/usr/sbin")
        if not exe:
            raise BenchError("mosquitto is not installed (apt-get install -y mosquitto)")
        conf = os.path.join(self.workdir, "mosquitto.conf")
        with open(conf, "w") as f:
            f.write(mosquitto_config(self.port))
        return [exe, "-c", conf]

    def version(self) -> str:
        try:
            out = subprocess.run([self.cmd[0], "-h"], capture_output=True, text=True,
                                 timeout=10, stdin=subprocess.DEVNULL).stdout
        except (OSError, subprocess.TimeoutExpired):
            return "unknown"
        first = out.splitlines()[0] if out else ""
        return first.split("version", 1)[1].strip() if "version" in first else first


def mosquitto_config(port: int) -> str:
    return (f"listener {port} {HOST}\n"
            "allow_anonymous true\n"
            "persistence false\n"
            "log_dest stdout\n"
            "log_type error\nlog_type warning\n"
            "max_queued_messages 0\n")


class Amqtt(PeerBroker):
    name = "amqtt"

    def command(self) -> list[str]:
        conf = os.path.join(self.workdir, "amqtt.yaml")
        with open(conf, "w") as f:
            f.write(amqtt_config(self.port))
        return [sys.executable, "-m", "amqtt.scripts.broker_script", "-c", conf]

    def version(self) -> str:
        try:
            from importlib.metadata import version
            return version("amqtt")
        except Exception:  # noqa: BLE001 -- a figure for the JSON, not worth failing over
            return "unknown"

    def start(self) -> Self:
        try:
            import amqtt  # noqa: F401 -- fail here, clearly, not in a child's log
        except ImportError:
            raise BenchError("amqtt is not installed (pip install amqtt)") from None
        return super().start()


def amqtt_config(port: int) -> str:
    return ("---\n"
            "listeners:\n"
            "  default:\n"
            "    type: tcp\n"
            f"    bind: {HOST}:{port}\n"
            "plugins:\n"
            "  amqtt.plugins.authentication.AnonymousAuthPlugin:\n"
            "    allow_anonymous: true\n")


PEERS: dict[str, type[PeerBroker]] = {"mosquitto": Mosquitto, "amqtt": Amqtt}


def main() -> None:
    import argparse
    import json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("broker", choices=sorted(PEERS))
    ap.add_argument("--dir", default=None, help="parent of the broker's temp dir")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        with PEERS[args.broker](args.dir) as b:
            print(json.dumps(b.info()), flush=True)
            while True:
                time.sleep(3600)
    except BenchError as exc:
        raise SystemExit(f"mqtt_peers: {exc}") from None
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
