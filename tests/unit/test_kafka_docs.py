"""docs/kafka.md's table of APIs and versions is exactly what ApiVersions advertises:
handlers.py's own table plus every module of ``protocol.MODULES``, names as kafka-python
spells them. A new API or version range without its row in the doc fails here. Its table
of topic names and their Kafka names is what gateway/kafka/names.py gives."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from logbus.gateway.kafka.handlers import KafkaHandlers
from logbus.gateway.kafka.names import from_kafka, to_kafka
from logbus.gateway.kafka.protocol import MODULES

DOC = Path(__file__).resolve().parents[2] / "docs" / "kafka.md"
ROW = re.compile(r"^\| (\w+) \((\d+)\) \| (\d+)–(\d+) \|")


def advertised() -> dict[int, tuple[str, int, int]]:
    handlers = KafkaHandlers(None, None, None, None, None)  # type: ignore[arg-type]  (only the table is read)
    for module in MODULES:
        module.install(handlers)
    out: dict[int, tuple[str, int, int]] = {}
    for key, (request_cls, _, lo, hi) in handlers.supported.items():
        out[key] = (request_cls.__name__.removesuffix("Request"), lo, hi)
    return out


def documented() -> dict[int, tuple[str, int, int]]:
    text = DOC.read_text()
    section = text[text.index("## APIs and versions"):]
    section = section[:section.index("\n## ", 1)]
    rows: dict[int, tuple[str, int, int]] = {}
    for line in section.splitlines():
        m = ROW.match(line)
        if m:
            name, key, lo, hi = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))
            assert key not in rows, f"API key {key} has two rows in {DOC.name}"
            rows[key] = (name, lo, hi)
    return rows


def test_doc_table_matches_the_api_table() -> None:
    doc, api = documented(), advertised()
    assert doc == api, _diff(doc, api)


def _diff(doc: dict[int, Any], api: dict[int, Any]) -> str:
    lines = [f"key {k}: doc {doc.get(k)} vs advertised {api.get(k)}"
             for k in sorted(set(doc) | set(api)) if doc.get(k) != api.get(k)]
    return "docs/kafka.md 'APIs and versions' is stale:\n" + "\n".join(lines)


NAME_ROW = re.compile(r"^\| `([^`]+)` \| `([^`]+)` \|")


def test_doc_topic_names_are_what_names_py_gives() -> None:
    text = DOC.read_text()
    section = text[text.index("## Topic names"):]
    section = section[:section.index("\n## ", 1)]
    rows = [m.groups() for m in map(NAME_ROW.match, section.splitlines()) if m]
    assert len(rows) >= 5
    for logbus_name, kafka_name in rows:
        assert to_kafka(logbus_name) == kafka_name, logbus_name
        assert from_kafka(kafka_name) == logbus_name, kafka_name
