"""A session's subscriptions: which of its filters a message's topic matches, and what the
one copy the session gets looks like. Pure.

MQTT 3.1.1 section 3.3.5 and MQTT 5.0 sections 3.3.4, 3.8.3.1 and 4.7:

- A session receives one copy of a message however many of its filters match (its
  queue is bound once per filter; the queue service enqueues once per queue). The copy's
  QoS is the highest of the matching subscriptions' maximum QoS, capped by the QoS it
  was published with; it carries the Subscription Identifier of every matching
  subscription that has one.
- No Local: a subscription with it set does not match the session's own publishes.
- Retain As Published: the retain flag stays as published if a matching subscription asks
  so; otherwise it is cleared (retained messages sent because of a SUBSCRIBE keep it:
  ``retained_on_subscribe``).
- Retain Handling: 0, send the retained messages at subscribe; 1, only if the
  subscription did not exist; 2, never.
- A filter whose first level is a wildcard does not match a topic beginning with ``$``.
- Subscribing again with the same filter replaces the subscription's options.

Shared subscriptions (``$share/<group>/<filter>``) are delivered from the group's own
queue and are kept here under their full filter, matched by their inner filter. A copy
from a group's queue goes by that shared subscription alone, one from the session's own
queue by its non-shared subscriptions: a message matching both kinds comes once by each
(MQTT 5 section 4.8.2).

Message filters (MQTT 5 SUBSCRIBE user properties ``filter-tag`` and ``filter-sql``,
docs/filters.md): a subscription with one matches only the messages its filter takes,
for the copy as for routing (its binding carries the filter); a session with any
filtered subscription works its copies out per message instead of from the cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ...filters import FilterError
from ...filters.message_filter import FilterSpec as Filtered
from .packets import Subscription

SEND_RETAINED, SEND_IF_NEW, DONT_SEND = 0, 1, 2  # Retain Handling
SHARE_PREFIX = "$share/"
SHARED_QUEUE = "mqtt-shared:"  # + <group>/<filter>: the queue of a shared subscription
FILTER_TAG, FILTER_SQL = "filter-tag", "filter-sql"  # SUBSCRIBE user properties


def matches(topic_filter: str, topic: str) -> bool:
    """Whether a (valid) MQTT topic filter matches a topic name."""
    if topic.startswith("$") and topic_filter[:1] in ("+", "#"):
        return False
    f, t = topic_filter.split("/"), topic.split("/")
    for i, level in enumerate(f):
        if level == "#":
            return True  # this level and all below it, the parent included
        if i >= len(t) or (level != "+" and level != t[i]):
            return False
    return len(f) == len(t)


def shared_queue(topic_filter: str) -> str:
    """The queue of a shared subscription ``$share/<group>/<filter>``."""
    return SHARED_QUEUE + topic_filter[len(SHARE_PREFIX):]


def shared_subscription(queue: str) -> str | None:
    """The shared subscription a queue is the group queue of (None: a session's own)."""
    return SHARE_PREFIX + queue[len(SHARED_QUEUE):] if queue.startswith(SHARED_QUEUE) else None


def inner_filter(topic_filter: str) -> str:
    """The filter a (maybe shared) subscription matches by."""
    if topic_filter.startswith(SHARE_PREFIX):
        return topic_filter.split("/", 2)[2]
    return topic_filter


@dataclass(frozen=True, slots=True)
class Copy:
    """How the session's copy of a message goes out."""

    qos: int
    retain: bool
    subscription_ids: tuple[int, ...] = ()


COPY_CACHE = 1024  # the copies a session remembers, per (topic, QoS, retain, own, shared)
_NONE = Copy(-1, False)  # a cached "no copy"


@dataclass
class Subscriptions:
    by_filter: dict[str, tuple[Subscription, int | None]] = field(default_factory=dict)  # filter -> (options, id)
    filters: dict[str, Filtered] = field(default_factory=dict)  # topic filter -> its message filter
    max_qos: int = -1  # the highest maximum QoS of any subscription (-1: none)
    # (topic, QoS, retain, own, shared) -> the copy, until the subscriptions change
    _copies: dict[tuple[str, int, bool, bool, str | None], Copy] = field(default_factory=dict, repr=False)
    # the one subscription that is not shared, when there is one alone: its copies depend on
    # the topic only by matching or not (a fleet's wildcard: no cache of every device's topic)
    _single: tuple[str, Subscription, int | None] | None = field(default=None, repr=False)
    _single_copies: dict[tuple[int, bool], Copy] = field(default_factory=dict, repr=False)

    def subscribe(self, s: Subscription, subscription_id: int | None = None, filtered: Filtered | None = None) -> bool:
        """Add or replace; True when the filter was subscribed already."""
        existed = s.topic_filter in self.by_filter
        self.by_filter[s.topic_filter] = (s, subscription_id)
        if filtered is None:
            self.filters.pop(s.topic_filter, None)
        else:
            self.filters[s.topic_filter] = filtered
        self._changed()
        return existed

    def unsubscribe(self, topic_filter: str) -> bool:
        """False when there was no such subscription (UNSUBACK 0x11 in 5.0)."""
        gone = self.by_filter.pop(topic_filter, None) is not None
        self.filters.pop(topic_filter, None)
        self._changed()
        return gone

    def forget_copies(self) -> None:
        """The connection is gone: what its deliveries remembered goes (an offline session
        would hold it for nothing)."""
        self._copies = {}

    def _changed(self) -> None:
        self._copies.clear()
        self._single_copies.clear()
        own = [(f, sub, sid) for f, (sub, sid) in self.by_filter.items() if not f.startswith(SHARE_PREFIX)]
        self._single = own[0] if len(own) == 1 else None
        self.max_qos = max((s.qos for s, _ in self.by_filter.values()), default=-1)

    def copy(self, topic: str, qos: int, retain: bool, *, own: bool, tag: str | None = None,
             properties: Callable[[], Mapping[str, Any]] | None = None, shared: str | None = None) -> Copy | None:
        """The session's copy of a message published to ``topic`` with ``qos`` and
        ``retain`` (``own``: by this session's client), or None if no subscription takes it
        (remembered until the subscriptions change). ``shared``: the shared subscription
        whose group queue the message came from, which alone decides that copy; None: the
        session's own queue, its non-shared subscriptions decide (MQTT 5 section 4.8.2: a
        message matching both kinds comes once by each). With filtered subscriptions, the
        message's ``tag`` and ``properties`` decide theirs, and nothing is remembered."""
        if self.filters:
            return self._copy(topic, qos, retain, own, shared, tag, properties or _no_properties)
        single = self._single
        if single is not None and shared is None:
            f, sub, sid = single
            if (own and sub.no_local) or not matches(f, topic):
                return None
            c = self._single_copies.get((qos, retain))
            if c is None:
                c = self._single_copies[(qos, retain)] = Copy(min(sub.qos, qos), retain and sub.retain_as_published,
                                                              () if sid is None else (sid,))
            return c
        key = (topic, qos, retain, own, shared)
        found = self._copies.get(key)
        if found is None:
            found = self._copy(topic, qos, retain, own, shared) or _NONE
            if len(self._copies) >= COPY_CACHE:
                self._copies.clear()
            self._copies[key] = found
        return None if found is _NONE else found

    def _copy(self, topic: str, qos: int, retain: bool, own: bool, shared: str | None, tag: str | None = None,
              properties: Callable[[], Mapping[str, Any]] = lambda: {}) -> Copy | None:
        best = -1
        keep_retain = False
        ids: list[int] = []
        filters = self.filters
        if shared is not None:
            one = self.by_filter.get(shared)
            subs = [one] if one is not None and matches(inner_filter(shared), topic) else []
        else:
            subs = [(s, sid) for f, (s, sid) in self.by_filter.items()
                    if not f.startswith(SHARE_PREFIX) and matches(f, topic)]
        for s, sid in subs:
            if own and s.no_local:
                continue
            f = filters.get(s.topic_filter) if filters else None
            if f is not None and not f.filter.matches(tag, properties):
                continue
            best = max(best, s.qos)
            keep_retain |= s.retain_as_published
            if sid is not None:
                ids.append(sid)
        if best < 0:
            return None
        return Copy(min(best, qos), retain and keep_retain, tuple(sorted(ids)))


def subscription_filter(properties: Any) -> tuple[Filtered | None, str | None]:
    """The message filter a SUBSCRIBE's user properties name (its last ``filter-tag`` and
    ``filter-sql``), or why it cannot be used (for the SUBACK's Reason String, with
    0x83: a SUBACK has no reason code for a bad filter)."""
    tag = sql = None
    for k, v in properties.user_properties:
        if k == FILTER_TAG:
            tag = v
        elif k == FILTER_SQL:
            sql = v
    if tag is None and sql is None:
        return None, None
    try:
        return Filtered.parse(tag, sql, FILTER_TAG, FILTER_SQL), None
    except FilterError as e:
        return None, str(e)


def _no_properties() -> Mapping[str, Any]:
    return {}


def retained_on_subscribe(s: Subscription, existed: bool) -> bool:
    """Whether a SUBSCRIBE sends the retained messages its filter matches (Retain Handling;
    never for a shared subscription, MQTT 5 section 4.8.2)."""
    if s.topic_filter.startswith(SHARE_PREFIX):
        return False
    return s.retain_handling == SEND_RETAINED or (s.retain_handling == SEND_IF_NEW and not existed)
