"""One name per kind of group (decision 0040): "consumer group" is Kafka's, "pop group" the
pop API's, and "group" alone names neither, in the CLI's commands and every help text,
in the HTTP API's JSON and in the console's menu, titles and tables, checked against a
real `logbus serve` holding one of each (a kafka-python commit, an HTTP pop receive)."""

from __future__ import annotations

import argparse
import html
import re
from collections.abc import Iterator

import pytest
from kafka import KafkaConsumer, TopicPartition  # type: ignore[import-untyped]
from kafka.structs import OffsetAndMetadata  # type: ignore[import-untyped]

from logbus.cli import build_parser
from tests.integration.mgmt import Mgmt
from tests.serverproc import LogbusServer, module_server, run_logbus

# "group" alone: not part of "consumer group", "pop group", kafka-consumer-groups,
# CONSUMER_GROUP or POP_GROUP
BARE = re.compile(r"(?<!consumer )(?<!pop )(?<!consumer-)\bgroups?\b", re.I)
CONSUMER_GROUP, POP_GROUP, TOPIC = "names-etl", "names-workers", "names-orders"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "group-names")


@pytest.fixture(scope="module", autouse=True)
def one_of_each(server: LogbusServer) -> None:
    mgmt = Mgmt(server)
    mgmt.ok("POST", "/api/topics", {"name": TOPIC, "partitions": 1})
    mgmt.ok("POST", f"/api/pop/{POP_GROUP}/{TOPIC}/receive", {"max": 1})
    consumer = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], group_id=CONSUMER_GROUP,
                             enable_auto_commit=False)
    tp = TopicPartition(TOPIC, 0)
    consumer.assign([tp])
    consumer.commit({tp: OffsetAndMetadata(0, "", -1)})
    consumer.close()


def _helps(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], str]]:
    """Every command's path and its --help text, unwrapped."""
    yield path, " ".join(parser.format_help().split())
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _helps(sub, (*path, name))


def test_the_cli_says_consumer_group_or_pop_group(server: LogbusServer) -> None:
    helps = dict(_helps(build_parser(), ("logbus",)))
    commands = {path[1] for path in helps if len(path) > 1}
    assert {"consumer-group", "pop", "dlq", "queue"} <= commands and "group" not in commands
    assert {p[2] for p in helps if p[1:2] == ("consumer-group",) and len(p) > 2} == {"list", "describe",
                                                                                   "reset-offsets"}
    bare = {" ".join(path): BARE.findall(text) for path, text in helps.items() if BARE.search(text)}
    assert bare == {}, bare
    top = run_logbus("--help")
    assert top.returncode == 0 and re.search(r"^ +consumer-group\b", top.stdout, re.M), top.stdout
    assert not re.search(r"^ +group\b", top.stdout, re.M), top.stdout

    # the old name still works, with a warning
    host, port = server.host_port("http")
    old = run_logbus("group", "list", "--server", f"{host}:{port}")
    assert old.returncode == 0 and CONSUMER_GROUP in old.stdout, old
    assert old.stderr == "logbus: 'logbus group' is now 'logbus consumer-group'\n"
    pops = run_logbus("pop", "list", "--server", f"{host}:{port}").stdout.splitlines()
    assert pops[0].split()[0] == "POP-GROUP" and pops[1].split()[:2] == [POP_GROUP, TOPIC]


def test_the_api_keys_say_consumer_group_or_pop_group(server: LogbusServer) -> None:
    mgmt = Mgmt(server)
    [consumer_group] = mgmt.ok("GET", "/api/consumer-groups").json()
    assert consumer_group["consumer_group"] == CONSUMER_GROUP and "group" not in consumer_group
    [pop_group] = mgmt.ok("GET", "/api/pop").json()
    assert pop_group["pop_group"] == POP_GROUP and "group" not in pop_group


def _texts(page: str) -> list[str]:
    """What names things on a console page: its title, headings, menu links, table
    captions and column headers."""
    tags = r"<(title|h1|h2|caption|th scope=\"col\"[^>]*)>(.*?)</"
    nav = re.search(r'<nav aria-label="Main">(.*?)</nav>', page, re.S)
    assert nav is not None
    return [html.unescape(re.sub("<[^>]+>", "", m[1])) for m in re.findall(tags, page, re.S)] \
        + [html.unescape(t) for t in re.findall(r">([^<>]+)</a>", nav.group(1))]


def test_the_console_says_consumer_group_or_pop_group(server: LogbusServer) -> None:
    mgmt = Mgmt(server)
    home = mgmt.ok("GET", "/").body.decode()
    menu = dict((html.unescape(text), path) for path, text in re.findall(r'<li><a href="([^"]+)"[^>]*>([^<]+)</a>',
                                                                          home))
    assert (menu["Consumer groups"], menu["Pop groups"]) == ("/consumer-groups", "/pop-groups")
    for path in [*menu.values(), f"/consumer-groups/{CONSUMER_GROUP}", f"/queues/~/{POP_GROUP}%2F{TOPIC}"]:
        page = mgmt.ok("GET", path).body.decode()
        bare = [t for t in _texts(page) if BARE.search(t)]
        assert bare == [], (path, bare)
    assert "<th scope=\"col\">Consumer group</th>" in mgmt.ok("GET", "/consumer-groups").body.decode()
    assert "<th scope=\"col\">Pop group</th>" in mgmt.ok("GET", "/pop-groups").body.decode()
