"""A session's subscriptions (gateway/mqtt/subscriptions.py): one copy per message with
the highest matching QoS and every matching subscription id, No Local, Retain As
Published, Retain Handling, '$' topics, shared filters. (That ``matches`` agrees with the
AMQP topic trie through the topic mapping is tests/unit/test_mqtt_topic_map.py.)"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from logbus.gateway.mqtt import Subscription
from logbus.gateway.mqtt.subscriptions import (
    DONT_SEND,
    SEND_IF_NEW,
    SEND_RETAINED,
    Copy,
    Filtered,
    Subscriptions,
    retained_on_subscribe,
    subscription_filter,
)
from logbus.gateway.mqtt.properties import Properties


def test_one_copy_with_the_highest_qos_and_every_id() -> None:
    s = Subscriptions()
    s.subscribe(Subscription("a/+", 0), 1)
    s.subscribe(Subscription("a/#", 1), 2)
    s.subscribe(Subscription("a/b", 2))  # no id
    assert s.copy("a/b", 2, False, own=False) == Copy(2, False, (1, 2))
    assert s.copy("a/b", 1, False, own=False) == Copy(1, False, (1, 2))  # capped by the publish
    assert s.copy("a/c/d", 2, False, own=False) == Copy(1, False, (2,))
    assert s.copy("b", 2, False, own=False) is None


def test_forgotten_copies_are_made_again() -> None:
    """A session's connection gone (gateway/mqtt/room.py ``detach``): the copies its
    deliveries remembered go, and the next delivery makes them again."""
    s = Subscriptions()
    s.subscribe(Subscription("a/+", 1), 7)
    s.subscribe(Subscription("b/#", 1), 8)  # two: remembered per topic
    assert s.copy("a/b", 2, False, own=False) == Copy(1, False, (7,))
    assert len(s._copies) == 1
    s.forget_copies()
    assert not s._copies
    assert s.copy("a/b", 2, False, own=False) == Copy(1, False, (7,)) and len(s._copies) == 1


def test_one_subscription_alone_remembers_no_topic() -> None:
    """A fleet's wildcard subscriber gets every device's topic: with one subscription
    (shared ones aside) the copy depends on the topic only by matching, and nothing is
    remembered per topic."""
    s = Subscriptions()
    s.subscribe(Subscription("fleet/#", 1, retain_as_published=True), 3)
    s.subscribe(Subscription("$share/g/fleet/#", 2))
    for i in range(2000):
        assert s.copy(f"fleet/{i}", 2, True, own=False) == Copy(1, True, (3,))
    assert s.copy("other", 1, False, own=False) is None
    assert not s._copies


def test_replace_and_unsubscribe() -> None:
    s = Subscriptions()
    assert s.subscribe(Subscription("t", 0)) is False
    assert s.subscribe(Subscription("t", 2)) is True  # replaced
    assert s.copy("t", 2, False, own=False) == Copy(2, False)
    assert s.unsubscribe("t") is True and s.unsubscribe("t") is False
    assert s.copy("t", 2, False, own=False) is None


def test_no_local_and_retain_as_published() -> None:
    s = Subscriptions()
    s.subscribe(Subscription("t", 1, no_local=True))
    assert s.copy("t", 1, False, own=True) is None
    assert s.copy("t", 1, True, own=False) == Copy(1, False)  # the retain flag is cleared
    s.subscribe(Subscription("#", 0, retain_as_published=True))
    assert s.copy("t", 1, True, own=True) == Copy(0, True)  # only '#' takes our own publish


def test_dollar_topics_and_shared_filters() -> None:
    s = Subscriptions()
    s.subscribe(Subscription("#", 1))
    s.subscribe(Subscription("+/uptime", 1))
    assert s.copy("$SYS/uptime", 1, False, own=False) is None
    s.subscribe(Subscription("$SYS/#", 1))
    assert s.copy("$SYS/uptime", 1, False, own=False) == Copy(1, False)
    shared = Subscriptions()
    group = "$share/g/sensors/+"
    shared.subscribe(Subscription(group, 1))
    assert shared.copy("sensors/a", 1, False, own=False, shared=group) == Copy(1, False)
    assert shared.copy("other", 1, False, own=False, shared=group) is None
    assert shared.copy("sensors/a", 1, False, own=False) is None  # from the session's own queue: not by it


def test_a_shared_and_a_plain_subscription_decide_their_own_copies() -> None:
    s = Subscriptions()
    s.subscribe(Subscription("t", 0), 1)
    s.subscribe(Subscription("$share/g/t", 2), 2)
    s.subscribe(Subscription("$share/h/#", 1), 3)
    assert s.copy("t", 2, False, own=False) == Copy(0, False, (1,))
    assert s.copy("t", 2, False, own=False, shared="$share/g/t") == Copy(2, False, (2,))
    assert s.copy("t", 2, False, own=False, shared="$share/h/#") == Copy(1, False, (3,))
    assert s.copy("t", 2, False, own=False, shared="$share/x/t") is None  # not subscribed (any more)


def test_retain_handling() -> None:
    assert retained_on_subscribe(Subscription("t", retain_handling=SEND_RETAINED), existed=True)
    assert retained_on_subscribe(Subscription("t", retain_handling=SEND_IF_NEW), existed=False)
    assert not retained_on_subscribe(Subscription("t", retain_handling=SEND_IF_NEW), existed=True)
    assert not retained_on_subscribe(Subscription("t", retain_handling=DONT_SEND), existed=False)
    assert not retained_on_subscribe(Subscription("$share/g/t"), existed=False)


def test_filtered_subscriptions_decide_per_message() -> None:
    s = Subscriptions()
    s.subscribe(Subscription("a/#", 2), 1, Filtered.parse(None, "temp > 30", "filter-tag", "filter-sql"))
    s.subscribe(Subscription("a/+", 0), 2, Filtered.parse("T", None, "filter-tag", "filter-sql"))
    s.subscribe(Subscription("a/b", 1), 3)

    def copy(tag: str | None, temp: int | None) -> Copy | None:
        return s.copy("a/b", 2, False, own=False, tag=tag, properties=lambda: {"temp": temp})

    assert copy("T", 35) == Copy(2, False, (1, 2, 3))
    assert copy(None, 35) == Copy(2, False, (1, 3))
    assert copy("T", 5) == Copy(1, False, (2, 3))  # the unfiltered a/b caps at 1
    assert copy(None, None) == Copy(1, False, (3,))
    assert s.copy("a/c", 2, False, own=False, tag=None, properties=lambda: {"temp": 1}) is None
    s.subscribe(Subscription("a/#", 2), 1)  # again, without: the filter goes
    assert "a/#" not in s.filters
    s.unsubscribe("a/+")
    assert set(s.filters) == set()


def test_subscription_filter_from_user_properties() -> None:
    assert subscription_filter(Properties()) == (None, None)
    f, why = subscription_filter(Properties(user_properties=(("filter-tag", "A"), ("filter-sql", "n = 1"),
                                                             ("other", "x"))))
    assert why is None and f is not None and (f.tag, f.sql) == ("A", "n = 1")
    assert f.arguments() == {"x-filter-tag": "A", "x-filter-sql": "n = 1"}
    f, why = subscription_filter(Properties(user_properties=(("filter-sql", "n >"),)))
    assert f is None and why is not None and why.startswith("filter-sql: expected")


_levels = st.sampled_from(["a", "b", "$s", "+", "#"])
_filters = st.lists(_levels, min_size=1, max_size=3).map("/".join).filter(lambda f: "#" not in f[:-1])
_topics = st.lists(st.sampled_from(["a", "b", "$s"]), min_size=1, max_size=3).map("/".join)


@given(subs=st.lists(st.tuples(st.one_of(_filters, _filters.map(lambda f: "$share/g/" + f)), st.integers(0, 2),
                               st.booleans(), st.booleans(), st.one_of(st.none(), st.integers(1, 9))),
                     max_size=3),
       copies=st.lists(st.tuples(_topics, st.integers(0, 2), st.booleans(), st.booleans(),
                                 st.one_of(st.none(), st.just("$share/g/a/+"), st.just("$share/g/#"))), max_size=6),
       unsubscribe=st.booleans())
def test_copies_agree_with_the_uncached_answer(subs: list, copies: list, unsubscribe: bool) -> None:
    """Whatever ``copy`` remembers (per topic, or the one subscription alone's flags), its
    answers are what ``_copy`` works out from every subscription each time."""
    s = Subscriptions()
    for f, qos, no_local, rap, sid in subs:
        s.subscribe(Subscription(f, qos, no_local, rap), sid)
    if unsubscribe and subs:
        s.unsubscribe(subs[0][0])
    for topic, qos, retain, own, shared in copies * 2:  # the second time from what was remembered
        assert s.copy(topic, qos, retain, own=own, shared=shared) == s._copy(topic, qos, retain, own, shared)
