"""Topic Names and Topic Filters (section 4.7 of both specs; shared subscriptions, 5.0 4.8.2).

    topic name    levels separated by "/", at least one character, no "+" or "#"
    topic filter  the same, but a level may be exactly "+" (one level), and the last
                  level may be exactly "#" (that level and everything below it)
    shared        "$share/" ShareName "/" filter, ShareName at least one character with
                  no "/", "+" or "#" (5.0 only: in 3.1.1 it is an ordinary filter)

The codec refuses a PUBLISH topic name that breaks these rules with Topic Name invalid
(0x90) and a SUBSCRIBE or UNSUBSCRIBE filter with Topic Filter invalid (0x8F), codes a 5.0
DISCONNECT may carry; a zero-length topic name is left to the caller of
``check_topic_name`` because 5.0 allows it alongside a Topic Alias.
"""

from __future__ import annotations

from .reasons import TOPIC_FILTER_INVALID, TOPIC_NAME_INVALID, MqttError

SHARE_PREFIX = "$share/"


def has_wildcard(name: str) -> bool:
    return "+" in name or "#" in name


def check_topic_name(name: str) -> None:
    if has_wildcard(name):
        raise MqttError(TOPIC_NAME_INVALID, f"topic name {name!r} contains a wildcard")


def check_topic_filter(topic_filter: str, shared: bool) -> str | None:
    """Raise Topic Filter invalid unless ``topic_filter`` is a well-formed filter. With
    ``shared`` (MQTT 5.0), a ``$share/`` filter must be well-formed as a shared
    subscription; its ShareName is returned (``None`` for a non-shared filter)."""
    share = None
    if shared and topic_filter.startswith(SHARE_PREFIX):
        share, sep, topic_filter = topic_filter[len(SHARE_PREFIX) :].partition("/")
        if not share or not sep or "+" in share or "#" in share:
            raise MqttError(TOPIC_FILTER_INVALID, f"shared subscription with share name {share!r}")
    if not topic_filter:
        raise MqttError(TOPIC_FILTER_INVALID, "empty topic filter")
    if "+" not in topic_filter and "#" not in topic_filter:
        return share
    levels = topic_filter.split("/")
    last = len(levels) - 1
    for i, level in enumerate(levels):
        if ("#" in level and (level != "#" or i != last)) or ("+" in level and level != "+"):
            raise MqttError(TOPIC_FILTER_INVALID, f"wildcard misplaced in {topic_filter!r}")
    return share
