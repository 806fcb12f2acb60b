"""A new topic's directory appears whole or not at all.

Theory of operation. The tree (``<partition>/`` directories, each with its empty first
segment ``.log``) is built under a temporary name in ``log/.creating/`` and synced there,
then renamed into place: a crash or a failure before the rename leaves only the temporary,
which ``remove_leftovers`` clears at the next start. What can fail after the rename
(opening the partitions: each needs a descriptor) is undone by ``take_back``, a rename
out of place again. Neither a rename, a mkdir, an unlink nor an rmdir needs a file
descriptor, so a creation that failed for want of descriptors (EMFILE) is undone all the
same; only listing a directory needs one, so what was built is removed by its known
names (``_remove``), and whatever else is there is left for the next start.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile

from .format import CREATING, INDEX_SUFFIX, KEYINDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_NAME, \
    partition_dirname, partition_index, segment_name
from .filecache import fsync_dir

log = logging.getLogger(__name__)

_FIRST_SEGMENT = tuple(segment_name(0) + suffix for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX,
                                                               KEYINDEX_SUFFIX))
_OPENED = (*_FIRST_SEGMENT, TXNINDEX_NAME)  # the files a partition has once opened (taken back by name)


def build(root: str, tdir: str, partitions: int, *, sync: bool) -> None:
    """Build topic directory ``tdir`` (in the log ``root``) with ``partitions`` empty
    partitions, under a temporary name renamed into place. ``sync``: the tree is durable
    before the rename (the rename itself: the caller syncs ``root``). Raises OSError,
    having left nothing at ``tdir``."""
    tmp = _temporary(root)
    try:
        for i in range(partitions):
            pdir = os.path.join(tmp, partition_dirname(i))
            os.mkdir(pdir)
            os.close(os.open(os.path.join(pdir, _FIRST_SEGMENT[0]), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                             0o644))
            if sync:
                fsync_dir(pdir)
        if sync:
            fsync_dir(tmp)
        _clear_place(tdir)
        os.rename(tmp, tdir)
    except BaseException:
        _remove(tmp, partitions)
        raise
    _remove_parent(root)


def take_back(root: str, tdir: str, partitions: int) -> None:
    """Undo a ``build`` whose topic could not be opened: ``tdir`` renamed out of place
    (onto an empty temporary, which a directory rename may replace), then removed."""
    tmp = None
    try:
        tmp = _temporary(root)
        os.rename(tdir, tmp)
    except OSError as e:
        log.error("a topic that could not be opened is left at %s: %s", tdir, e)
        if tmp is not None:
            os.rmdir(tmp)
        _remove_parent(root)
        return
    _remove(tmp, partitions)


def remove_leftovers(root: str) -> None:
    """At start: the temporaries of creations a crash interrupted."""
    shutil.rmtree(os.path.join(root, CREATING), ignore_errors=True)


def _temporary(root: str) -> str:
    parent = os.path.join(root, CREATING)
    os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(dir=parent)


def _remove_parent(root: str) -> None:
    """``.creating`` goes once empty: it is there only while a topic is being created."""
    try:
        os.rmdir(os.path.join(root, CREATING))
    except OSError:
        pass


def foreign_file(tdir: str) -> str | None:
    """A file at a new topic's place ``tdir`` that is not an empty first segment, None if
    there is none. Empty first segments hold nothing: they are what a failed creation of
    a version before this module left (its cleanup needed descriptors it did not have)."""
    for dirpath, _dirs, files in os.walk(tdir):
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            if not _empty_first_segment(tdir, path):
                return path
    return None


def _empty_first_segment(tdir: str, path: str) -> bool:
    pdir, name = os.path.split(path)
    return (name == _FIRST_SEGMENT[0] and os.path.dirname(pdir) == tdir
            and partition_index(os.path.basename(pdir)) is not None and os.path.getsize(path) == 0)


def _clear_place(tdir: str) -> None:
    """Empty directories and empty first segments at the topic's place go, so the rename
    can take it; any other file makes this raise (``foreign_file`` found none before)."""
    if not os.path.isdir(tdir):
        return
    for dirpath, _dirs, files in os.walk(tdir, topdown=False):
        for name in files:
            path = os.path.join(dirpath, name)
            if _empty_first_segment(tdir, path):
                os.unlink(path)
        os.rmdir(dirpath)


def _remove(tmp: str, partitions: int) -> None:
    """Remove a temporary by the names ``build`` gave (no descriptor needed), then whatever
    else a listing finds; what stays is removed at the next start."""
    for i in range(partitions):
        pdir = os.path.join(tmp, partition_dirname(i))
        for name in _OPENED:
            try:
                os.unlink(os.path.join(pdir, name))
            except FileNotFoundError:
                pass
            except OSError:
                break
        try:
            os.rmdir(pdir)
        except OSError:
            pass
    try:
        os.rmdir(tmp)
    except FileNotFoundError:
        pass
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if os.path.exists(tmp):
            log.warning("%s is left until the next start", tmp)
    _remove_parent(os.path.dirname(os.path.dirname(tmp)))
