#!/usr/bin/env python3
"""A private RabbitMQ node for benchmarks: started from the installed package (Debian's
rabbitmq-server), on free loopback ports, with its data, logs, config and Erlang cookie
in a temp dir, and stopped by the pids it started -- nothing else on the machine is
touched (not the packaged system service, not its epmd, not /var/lib/rabbitmq).

Theory of operation:

    epmd -port P -address 127.0.0.1       our own port mapper, a direct child (no -daemon)
    sh .../sbin/rabbitmq-server            the package's start script, run directly (not
      beam.smp  (same pid as the `exec erl` the /usr/sbin wrapper, which `su`s to the
                 subshell of that script)   rabbitmq user and writes /var/log/rabbitmq)

The node gets a unique RABBITMQ_NODENAME, RABBITMQ_NODE_PORT / RABBITMQ_DIST_PORT /
ERL_EPMD_PORT picked free on 127.0.0.1, ``-start_epmd false`` (so beam never spawns a
daemon epmd we would not own), RABBITMQ_CONF_ENV_FILE / RABBITMQ_CONFIG_FILE /
RABBITMQ_ENABLED_PLUGINS_FILE (``[].``: no management plugin) in the temp dir, and
HOME there too (the .erlang.cookie). Ready means: a TCP connection to the AMQP port is
answered with Connection.Start. Stop: SIGTERM to beam.smp (RabbitMQ stops cleanly on
it), SIGKILL after a grace period, then SIGTERM to our epmd. Every signal goes to a pid
that is re-checked first to still be the process we started.

    python bench/rabbitmq.py        # start one, print {"url", "pid", ...}, stop on Ctrl-C
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from typing import Self

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import StartStop, free_ports, tail

AMQP_HEADER = b"AMQP\x00\x00\x09\x01"
CONNECTION_START = (10, 10)  # class, method


class RabbitMQError(Exception):
    pass


def find_server_script() -> str:
    """The package's own start script (not the /usr/sbin wrapper, which su's to the
    rabbitmq user and writes its output under /var/log/rabbitmq)."""
    found = sorted(glob.glob("/usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin/rabbitmq-server"))
    if not found:
        raise RabbitMQError("RabbitMQ is not installed (apt-get install -y rabbitmq-server)")
    return found[-1]


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(comm, ppid) of a live process, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    comm = data[data.index("(") + 1:data.rindex(")")]
    fields = data.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return None
    return comm, int(fields[1])


def children_named(ppid: int, comm: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = proc_stat(int(entry))
            if st is not None and st == (comm, ppid):
                found.append(int(entry))
    return found


def amqp_answers(port: int, timeout: float = 2.0) -> bool:
    """True if the port answers the AMQP 0-9-1 header with Connection.Start."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(AMQP_HEADER)
            head = b""
            while len(head) < 11:  # frame header (7) + class id + method id
                chunk = s.recv(11 - len(head))
                if not chunk:
                    return False
                head += chunk
    except OSError:
        return False
    ftype, channel, _size, cls, meth = struct.unpack(">BHIHH", head)
    return ftype == 1 and channel == 0 and (cls, meth) == CONNECTION_START


class RabbitMQ(StartStop):
    """Context manager: ``with RabbitMQ() as rmq: rmq.url, rmq.pid (beam.smp)``."""

    def __init__(self, directory: str | None = None, start_timeout: float = 60.0, stop_timeout: float = 30.0,
                 keep_dir: bool = False) -> None:
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.keep_dir = keep_dir
        self.workdir = tempfile.mkdtemp(prefix="logbus-rabbitmq-", dir=directory)
        self.nodename = f"logbus-bench-{os.getpid()}-{os.urandom(3).hex()}@localhost"
        self.port = self.dist_port = self.epmd_port = 0
        self.url = ""
        self.pid = 0  # beam.smp
        self.script: subprocess.Popen[bytes] | None = None
        self.epmd: subprocess.Popen[bytes] | None = None

    # -- start ---------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        w = self.workdir
        conf_env = os.path.join(w, "rabbitmq-env.conf")
        open(conf_env, "w").close()  # empty: /etc/rabbitmq/rabbitmq-env.conf is not read
        with open(os.path.join(w, "enabled_plugins"), "w") as f:
            f.write("[].\n")  # no management (or any other) plugin
        with open(os.path.join(w, "rabbitmq.conf"), "w") as f:
            f.write("log.console = false\nlog.file.level = info\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_", "NOTIFY_SOCKET"))}
        env.update({
            "HOME": w,  # the node's .erlang.cookie
            "RABBITMQ_NODENAME": self.nodename,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_CONF_ENV_FILE": conf_env,
            "RABBITMQ_CONFIG_FILE": os.path.join(w, "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": os.path.join(w, "advanced.config"),  # absent: none
            "RABBITMQ_ENABLED_PLUGINS_FILE": os.path.join(w, "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": os.path.join(w, "mnesia"),
            "RABBITMQ_LOG_BASE": os.path.join(w, "log"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS":
                "-start_epmd false -kernel inet_dist_use_interface {127,0,0,1}",
            "ERL_CRASH_DUMP": os.path.join(w, "erl_crash.dump"),
        })
        return env

    def start(self) -> Self:
        script = find_server_script()
        epmd = shutil.which("epmd") or ""
        if not epmd:
            raise RabbitMQError("epmd not found (it comes with erlang-base)")
        self.port, self.dist_port, self.epmd_port = free_ports(3)
        env = self._env()
        os.makedirs(env["RABBITMQ_LOG_BASE"])
        with open(os.path.join(self.workdir, "startup.log"), "wb") as log:
            self.epmd = subprocess.Popen(
                [epmd, "-port", str(self.epmd_port), "-address", "127.0.0.1"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd=self.workdir,
                start_new_session=True,
            )
            self.script = subprocess.Popen(
                ["/bin/sh", script], stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                cwd=self.workdir, start_new_session=True,  # Ctrl-C reaches us, not the node
            )
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/"
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self.epmd.poll() is not None:
                raise RabbitMQError(f"epmd exited ({self.epmd.returncode}) on port {self.epmd_port}:\n"
                                    + self.logs())
            if self.script.poll() is not None:
                raise RabbitMQError(f"rabbitmq-server exited ({self.script.returncode}) while starting:\n"
                                    + self.logs())
            if not self.pid:
                beams = children_named(self.script.pid, "beam.smp")
                self.pid = beams[0] if beams else 0
            if self.pid and amqp_answers(self.port):
                return self
            if time.monotonic() > deadline:
                raise RabbitMQError(f"RabbitMQ did not accept AMQP connections on 127.0.0.1:{self.port} "
                                    f"within {self.start_timeout:g} s:\n" + self.logs())
            time.sleep(0.2)

    def logs(self) -> str:
        node_log = os.path.join(self.workdir, "log", self.nodename + ".log")
        return (f"--- {self.workdir}/startup.log\n" + tail(os.path.join(self.workdir, "startup.log"), 25)
                + f"--- {node_log}\n" + tail(node_log, 25))

    # -- stop ----------------------------------------------------------------------

    def _signal_if_ours(self, pid: int, comm: str, ppid: int, sig: int) -> bool:
        """Signal ``pid`` only while it is still our ``comm`` child of ``ppid``."""
        if proc_stat(pid) != (comm, ppid):
            return False
        os.kill(pid, sig)
        return True

    def stop(self) -> None:
        try:
            if self.script is not None:
                if not self.pid:  # stopped during start-up: maybe beam is there by now
                    beams = children_named(self.script.pid, "beam.smp")
                    self.pid = beams[0] if beams else 0
                if self.pid:
                    self._signal_if_ours(self.pid, "beam.smp", self.script.pid, signal.SIGTERM)
                    deadline = time.monotonic() + self.stop_timeout
                    while proc_stat(self.pid) == ("beam.smp", self.script.pid) and time.monotonic() < deadline:
                        time.sleep(0.1)
                    if self._signal_if_ours(self.pid, "beam.smp", self.script.pid, signal.SIGKILL):
                        print(f"rabbitmq: beam.smp {self.pid} ignored SIGTERM for {self.stop_timeout:g} s, "
                              "killed", file=sys.stderr)
                try:
                    self.script.wait(10)
                except subprocess.TimeoutExpired:
                    self.script.kill()  # our own sh, by its Popen
                    self.script.wait(10)
            if self.epmd is not None and self.epmd.poll() is None:
                self.epmd.terminate()
                try:
                    self.epmd.wait(10)
                except subprocess.TimeoutExpired:
                    self.epmd.kill()
                    self.epmd.wait(10)
        finally:
            if not self.keep_dir:
                shutil.rmtree(self.workdir, ignore_errors=True)


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=None, help="parent of the node's temp dir")
    ap.add_argument("--keep-dir", action="store_true", help="leave data and logs after stopping")
    ap.add_argument("--start-timeout", type=float, default=60.0)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        with RabbitMQ(args.dir, args.start_timeout, keep_dir=args.keep_dir) as rmq:
            print(json.dumps({"url": rmq.url, "pid": rmq.pid, "nodename": rmq.nodename, "dir": rmq.workdir,
                              "epmd_port": rmq.epmd_port, "dist_port": rmq.dist_port}), flush=True)
            while True:
                time.sleep(3600)
    except RabbitMQError as exc:
        raise SystemExit(f"rabbitmq: {exc}") from None
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
