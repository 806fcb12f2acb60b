"""``python -m logbus.spark.warm``: compile the record decoder (numba) once, at install
time, into its on-disk cache (``cache=True``, beside ``kernel.py``), so that no Spark
worker or ``logbus export`` pays the compilation (about 4 s) on its first read. It
writes a small log with the real log code (records with keys, headers and envelopes,
compressed and not) in a temporary directory and decodes it with every column."""

from __future__ import annotations

import tempfile
import time


def main() -> None:
    from ..core.envelope_pb2 import Envelope
    from ..core.log import LogManager, Record, TopicConfig
    from ..core.message import Message
    from . import schema as S
    from .plan import OffsetRange, read_range

    class _Loop:  # the log's reactor calls, none of which matters here
        def callLater(self, delay: float, f: object, *args: object) -> object:
            return None

        def callFromThread(self, f: object, *args: object) -> None:
            pass

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        lm = LogManager(d, _Loop(), inline_flush=False, key_index=False)
        p = lm.open_topic("warm", TopicConfig(flush="none"), create=True).partition(0)
        env = Envelope(protocol=Envelope.MQTT, tag="t", mqtt_topic="a/b")
        p.append([Message(b"k", b"v" * 50, 1, [("h", b"x")], env).to_record(), Record(None, b"plain", 2, [])])
        lm.drain()
        rows = sum(rb.num_rows for rb in read_range(d, OffsetRange("warm", 0, 0, 2), S.columns(True), True))
        lm.close()
    print(f"logbus.spark: the decoder is compiled and cached ({rows} records read in "
          f"{time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
