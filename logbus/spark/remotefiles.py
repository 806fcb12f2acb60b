"""The log read from object storage: tiered topics' remote segments in an S3 bucket
(docs/tiering.md, docs/format.md section 10.5), alone or under a data directory's.

Theory of operation. A partition's ``manifest.json`` names its remote segments; nothing
else in the bucket is trusted (objects it does not name are uploads cut short). Reading
goes through a standard S3 client, pyarrow's ``S3FileSystem`` (credentials from the AWS
environment variables and files, like the broker's), as ranged reads of the segment
objects, so ``logfiles.PartitionFiles``' reading code runs unchanged over them:
``RemotePartitionFiles`` only replaces its file access. ``CombinedPartitionFiles`` reads a
partition whose newer segments are in a data directory and older ones in the bucket (the
local copy wins where a segment is in both).

    log = Location(path="", remote="s3://bucket/prefix", endpoint="http://127.0.0.1:8333").open()
    log.partition("telemetry", 0).chunks(0, 1000)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..core.log import format as F
from ..core.log.manifest import MANIFEST_NAME, Manifest, RemoteSegment, parse_remote, partition_prefix
from .logfiles import DataDir, LogReadError, PartitionFiles, SegmentFile


def filesystem(endpoint: str = "") -> Any:
    """pyarrow's S3 filesystem, at ``endpoint`` when given (an S3-compatible store)."""
    from pyarrow import fs as pafs

    kw: dict[str, Any] = {}
    if endpoint:
        parts = urlsplit(endpoint)
        kw["endpoint_override"] = parts.netloc
        kw["scheme"] = parts.scheme or "https"
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return pafs.S3FileSystem(region=region, **kw)


@dataclass(frozen=True)
class Location:
    """Where a log is read from: a data directory (``path``), a bucket (``remote``,
    ``s3://BUCKET/PREFIX``, at ``endpoint``), or both. Picklable: Spark's executors get it."""

    path: str = ""
    remote: str = ""
    endpoint: str = ""

    def open(self) -> DataDir | RemoteDir | CombinedDir:
        if self.remote and self.path:
            return CombinedDir(DataDir(self.path), RemoteDir(self.remote, self.endpoint))
        if self.remote:
            return RemoteDir(self.remote, self.endpoint)
        return DataDir(self.path)

    def __str__(self) -> str:
        return " + ".join(filter(None, (self.path, self.remote)))


class RemoteSegmentFile(SegmentFile):
    def __init__(self, fs: Any, path: str, size: int) -> None:
        self._file = fs.open_input_file(path)
        self.size = size

    def pread(self, n: int, position: int) -> bytes:
        n = min(n, self.size - position)
        return b"" if n <= 0 else bytes(self._file.read_at(n, position))

    def __exit__(self, *exc: object) -> None:
        self._file.close()


class RemotePartitionFiles(PartitionFiles):
    """A partition's remote segments, as its manifest names them (read once)."""

    def __init__(self, fs: Any, root: str, topic: str, index: int, manifest: Manifest | None) -> None:
        super().__init__(f"{root}/{partition_prefix('', topic, index)}".rstrip("/"), topic, index)
        self.fs = fs
        self.manifest = manifest or Manifest(topic, index, "", 0, 0)
        self._by_base: dict[int, RemoteSegment] = {s.base_offset: s for s in self.manifest.segments}

    def __repr__(self) -> str:
        return f"<RemotePartitionFiles {self.topic}/{self.index} in {self.directory}>"

    def _object(self, seg: RemoteSegment, suffix: str) -> str:
        return f"{self.directory}/{seg.name(suffix)}"

    def open_segment(self, base: int) -> SegmentFile:
        seg = self._by_base.get(base)
        if seg is None:
            raise FileNotFoundError(f"no remote segment {base} of {self.topic}/{self.index}")
        return RemoteSegmentFile(self.fs, self._object(seg, F.LOG_SUFFIX), seg.size)

    def segment_exists(self, base: int) -> bool:
        return base in self._by_base

    def index_bytes(self, base: int, suffix: str) -> bytes | None:
        seg = self._by_base.get(base)
        if seg is None:
            return None
        try:
            with self.fs.open_input_file(self._object(seg, suffix)) as f:
                return bytes(f.readall())
        except (FileNotFoundError, OSError):
            return None

    def segments(self) -> list[int]:
        return [s.base_offset for s in self.manifest.segments]

    def start(self) -> int:
        return self.manifest.start_offset

    def end(self) -> int:
        return self.manifest.end_offset  # sealed segments: complete and CRC-checked when read

    def aborted(self) -> list[F.AbortedTxn]:
        return list(self.manifest.aborted)


class CombinedPartitionFiles(PartitionFiles):
    """A partition's remote segments below its local ones, read as one log."""

    def __init__(self, local: PartitionFiles, remote: RemotePartitionFiles) -> None:
        super().__init__(local.directory, local.topic, local.index)
        self.local, self.remote = local, remote

    def _local_first(self) -> int | None:
        bases = self.local.segments()
        return bases[0] if bases else None

    def _owner(self, base: int) -> PartitionFiles:
        first = self._local_first()
        return self.local if first is not None and base >= first else self.remote

    def segments(self) -> list[int]:
        first = self._local_first()
        remote = [b for b in self.remote.segments() if first is None or b < first]
        return remote + self.local.segments()

    def open_segment(self, base: int) -> SegmentFile:
        return self._owner(base).open_segment(base)

    def segment_exists(self, base: int) -> bool:
        return self._owner(base).segment_exists(base)

    def index_bytes(self, base: int, suffix: str) -> bytes | None:
        return self._owner(base).index_bytes(base, suffix)

    def start(self) -> int:
        bases = self.segments()
        if self.remote.manifest.segments and bases and bases[0] < (self._local_first() or bases[0] + 1):
            return self.remote.start()
        return self.local.start()

    def end(self) -> int:
        return self.local.end() if self._local_first() is not None else self.remote.end()

    def aborted(self) -> list[F.AbortedTxn]:
        return sorted(set(self.remote.aborted()) | set(self.local.aborted()), key=lambda a: a.last_offset)


class RemoteDir:
    """The topics of a bucket's prefix."""

    def __init__(self, url: str, endpoint: str = "") -> None:
        bucket, prefix = parse_remote(url)
        self.url = url
        self.fs = filesystem(endpoint)
        self.root = f"{bucket}/{prefix}".rstrip("/")

    def _dirs(self, path: str) -> list[str]:
        from pyarrow import fs as pafs

        try:
            infos = self.fs.get_file_info(pafs.FileSelector(path, recursive=False, allow_not_found=True))
        except OSError as e:
            raise LogReadError(f"cannot list {self.url}: {e}") from None
        return [i.base_name for i in infos if i.type == pafs.FileType.Directory]

    def topics(self) -> list[str]:
        return sorted(F.topic_name(d) for d in self._dirs(self.root) if not d.startswith("."))

    def partitions(self, topic: str) -> list[int]:
        found = (F.partition_index(d) for d in self._dirs(f"{self.root}/{F.topic_dirname(topic)}"))
        return sorted(i for i in found if i is not None)

    def partition(self, topic: str, index: int) -> RemotePartitionFiles:
        path = f"{self.root}/{partition_prefix('', topic, index)}{MANIFEST_NAME}"
        try:
            with self.fs.open_input_file(path) as f:
                manifest: Manifest | None = Manifest.decode(bytes(f.readall()))
        except FileNotFoundError:
            manifest = None
        except OSError as e:
            raise LogReadError(f"cannot read {path}: {e}") from None
        return RemotePartitionFiles(self.fs, self.root, topic, index, manifest)


class CombinedDir:
    """A data directory over the bucket its broker tiers to."""

    def __init__(self, local: DataDir, remote: RemoteDir) -> None:
        self.local, self.remote = local, remote

    def topics(self) -> list[str]:
        return sorted(set(self.local.topics()) | set(self.remote.topics()))

    def partitions(self, topic: str) -> list[int]:
        return sorted(set(self.local.partitions(topic)) | set(self.remote.partitions(topic)))

    def partition(self, topic: str, index: int) -> PartitionFiles:
        local = self.local.partition(topic, index)
        remote = self.remote.partition(topic, index)
        if not remote.manifest.segments:
            return local
        return CombinedPartitionFiles(local, remote)
