"""Tiered storage's layout in an S3 bucket, and each partition's manifest.

Like ``format.py`` it imports neither Twisted nor an S3 client, so readers outside the
broker (``logbus.spark``) import it alone; docs/format.md (section "Remote storage")
describes the same in prose. Names under the bucket's prefix::

    s3://BUCKET/PREFIX/
      <topic dir>/<partition>/                    as in the data directory (format.py)
        manifest.json                             MANIFEST_NAME: the source of truth
        {base:020d}-{id}.log                      a sealed segment, byte for byte
        {base:020d}-{id}.index                    its offset index
        {base:020d}-{id}.timeindex                its time index

A segment's objects are written first, under a new ``id`` for every upload (so an
upload never overwrites an object a manifest names), and the manifest after them: a
segment is remote once the manifest lists it, and only then. Objects no manifest lists
are leftovers of an upload cut short, deleted by the broker that wrote them.

The manifest is one JSON object (``Manifest.encode``)::

    {"format": 1, "topic": "t", "partition": 0,
     "incarnation": "5d0c...",      which life of the topic wrote it (a random id)
     "version": 12,                 one more at every write
     "log_start_offset": 0,         readers start here (>= the first segment's base)
     "segments": [{"base_offset": 0, "next_offset": 5000, "size": 8388123,
                   "max_timestamp": 1765..., "id": "0f3a9c21e4b7", "uploaded_ms": 1765...}],
     "aborted": [[producer_id, first_offset, last_offset, last_stable_offset], ...]}

``segments`` are in offset order and contiguous; ``aborted`` lists the aborted
transactions with records in them (the partition's ``aborted.txnindex`` entries, as
``format.AbortedTxn``), for read_committed readers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from . import format as F

MANIFEST_NAME = "manifest.json"
LOCAL_COPY_NAME = "remote.json"  # in a partition directory: the manifest as last written
FORMAT_VERSION = 1
SCHEMES = ("s3",)


class ManifestDamaged(ValueError):
    """A manifest that does not parse or breaks its own rules."""


class RemoteUrlError(ValueError):
    """A remote storage location that is not ``s3://BUCKET[/PREFIX]``."""


@dataclass(frozen=True, slots=True)
class RemoteSegment:
    base_offset: int
    next_offset: int
    size: int
    max_timestamp: int
    id: str
    uploaded_ms: int = 0

    def name(self, suffix: str) -> str:
        """The object name of this upload's ``suffix`` (``format.LOG_SUFFIX``, ...)."""
        return f"{F.segment_name(self.base_offset)}-{self.id}{suffix}"

    def names(self) -> tuple[str, str, str]:
        return self.name(F.LOG_SUFFIX), self.name(F.INDEX_SUFFIX), self.name(F.TIMEINDEX_SUFFIX)


@dataclass(frozen=True, slots=True)
class Manifest:
    topic: str
    partition: int
    incarnation: str
    version: int = 0
    log_start_offset: int = 0
    segments: tuple[RemoteSegment, ...] = ()
    aborted: tuple[F.AbortedTxn, ...] = field(default=())
    bases: tuple[int, ...] = field(init=False, repr=False, compare=False)  # the segments' base offsets

    def __post_init__(self) -> None:
        object.__setattr__(self, "bases", tuple(s.base_offset for s in self.segments))

    @property
    def end_offset(self) -> int:
        """The offset after the last remote segment (the log start when there is none)."""
        return self.segments[-1].next_offset if self.segments else self.log_start_offset

    @property
    def start_offset(self) -> int:
        """The first offset a reader may read from the remote segments."""
        return max(self.segments[0].base_offset, self.log_start_offset) if self.segments else self.log_start_offset

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    def encode(self) -> bytes:
        doc: dict[str, Any] = {
            "format": FORMAT_VERSION, "topic": self.topic, "partition": self.partition,
            "incarnation": self.incarnation, "version": self.version,
            "log_start_offset": self.log_start_offset,
            "segments": [{"base_offset": s.base_offset, "next_offset": s.next_offset, "size": s.size,
                          "max_timestamp": s.max_timestamp, "id": s.id, "uploaded_ms": s.uploaded_ms}
                         for s in self.segments],
            "aborted": [list(a) for a in self.aborted],
        }
        return json.dumps(doc, separators=(",", ":")).encode() + b"\n"

    @classmethod
    def decode(cls, data: bytes) -> "Manifest":
        """The manifest ``data`` holds; ManifestDamaged when it is not one."""
        try:
            doc = json.loads(data)
            if not isinstance(doc, dict) or doc.get("format") != FORMAT_VERSION:
                raise ManifestDamaged(f"not a format {FORMAT_VERSION} manifest")
            segments = tuple(RemoteSegment(_int(s["base_offset"]), _int(s["next_offset"]), _int(s["size"]),
                                           _int(s["max_timestamp"]), _str(s["id"]), _int(s.get("uploaded_ms", 0)))
                             for s in doc["segments"])
            aborted = tuple(F.AbortedTxn(*(_int(v) for v in a)) for a in doc.get("aborted", ()))
            m = cls(_str(doc["topic"]), _int(doc["partition"]), _str(doc["incarnation"]), _int(doc["version"]),
                    _int(doc["log_start_offset"]), segments, aborted)
        except ManifestDamaged:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ManifestDamaged(f"manifest does not parse: {e!r}") from None
        m.check()
        return m

    def check(self) -> None:
        """ManifestDamaged unless the segments are in order, contiguous and well formed."""
        at = None
        for s in self.segments:
            if not (0 <= s.base_offset < s.next_offset and s.size > 0 and s.id and s.id.isalnum()):
                raise ManifestDamaged(f"segment {s} is not well formed")
            if at is not None and s.base_offset != at:
                raise ManifestDamaged(f"segment at {s.base_offset} does not follow the one ending at {at}")
            at = s.next_offset
        if self.log_start_offset < 0 or self.partition < 0 or self.version < 0:
            raise ManifestDamaged("negative log start offset, partition or version")

    def with_segment(self, seg: RemoteSegment, aborted: tuple[F.AbortedTxn, ...] | None = None) -> "Manifest":
        """This manifest with ``seg`` added at its end (and, given, ``aborted`` as its list)."""
        return Manifest(self.topic, self.partition, self.incarnation, self.version + 1, self.log_start_offset,
                        self.segments + (seg,), self.aborted if aborted is None else aborted)

    def without_below(self, offset: int) -> tuple["Manifest", tuple[RemoteSegment, ...]]:
        """This manifest with the log start at ``offset`` (never back) and the segments
        wholly below it left out, and those segments."""
        start = max(self.log_start_offset, offset)
        gone = tuple(s for s in self.segments if s.next_offset <= start)
        kept = self.segments[len(gone):]
        aborted = tuple(a for a in self.aborted if a.last_offset >= start)
        return Manifest(self.topic, self.partition, self.incarnation, self.version + 1, start, kept,
                        aborted), gone


def _int(v: Any) -> int:
    if type(v) is not int:
        raise ManifestDamaged(f"{v!r} is not an integer")
    return v


def _str(v: Any) -> str:
    if type(v) is not str:
        raise ManifestDamaged(f"{v!r} is not a string")
    return v


def parse_remote(url: str) -> tuple[str, str]:
    """``s3://BUCKET/PREFIX`` -> (bucket, prefix), the prefix empty or ending in ``/``."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES or not parts.netloc or parts.query or parts.fragment:
        raise RemoteUrlError(f"remote storage must be s3://BUCKET or s3://BUCKET/PREFIX, not {url!r}")
    bucket = parts.netloc
    if (not 3 <= len(bucket) <= 63 or bucket != bucket.lower() or not bucket[0].isalnum()
            or not all(c.isalnum() or c in ".-" for c in bucket)):
        raise RemoteUrlError(f"{bucket!r} is not an S3 bucket name (3-63 of a-z, 0-9, '.' and '-')")
    prefix = parts.path.strip("/")
    return bucket, (prefix + "/" if prefix else "")


def partition_prefix(prefix: str, topic: str, partition: int) -> str:
    """Where a partition's objects are under the bucket: ``PREFIX<topic dir>/<partition>/``."""
    return f"{prefix}{F.topic_dirname(topic)}/{F.partition_dirname(partition)}/"
