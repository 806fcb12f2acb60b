"""logbus's own options in a listener's endpoint string (gateway/listener.py), taken out
before Twisted parses the rest: whatever the values (escaped colons too), what is left is
the endpoint without them, and each value comes back as given."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logbus.gateway.listener import DEFAULT_RULES, ListenerRules, rules_of, split_options

value = st.text(st.characters(blacklist_characters="\\\x00", blacklist_categories=("Cs",)), max_size=30)


@given(value, st.sampled_from(["off", "loopback"]), st.booleans())
def test_options_come_out_whole_and_leave_the_endpoint(ca_dir: str, anonymous: str, ca_first: bool) -> None:
    escaped = ca_dir.replace(":", "\\:")
    parts = [f":caCertsDir={escaped}", f":anonymous={anonymous}"]
    if not ca_first:
        parts.reverse()
    base = "ssl:8883:privateKey=key.pem:certKey=cert.pem"
    left, options = split_options(base + "".join(parts))
    assert left == base
    assert options == {"caCertsDir": ca_dir, "anonymous": anonymous}
    assert rules_of(options) == ListenerRules(anonymous)


def test_an_endpoint_without_options_is_left_alone() -> None:
    assert split_options("tcp:1883:interface=127.0.0.1") == ("tcp:1883:interface=127.0.0.1", {})
    assert rules_of({}) == DEFAULT_RULES
    with pytest.raises(ValueError, match="given twice"):
        split_options("tcp:1:anonymous=off:anonymous=off")
    with pytest.raises(ValueError, match="one of off, loopback"):
        rules_of({"anonymous": "on"})
