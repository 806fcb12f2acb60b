"""The `logbus` command: argument parsing and output only; the work is in server.py and
gateway/http/client.py.

    logbus serve [--config F] [--data-dir DIR] [--amqp EP] [--mqtt EP] [--kafka EP] [--http EP] ...
    logbus topic create NAME [--partitions N] [--config k=v ...]
    logbus topic alter NAME --config k=v ...
    logbus topic list | describe NAME | delete NAME [--force] [--json]
    logbus pop receive POP_GROUP TOPIC [--max N] [--invisible-ms MS] [--member NAME] [--filter-tag EXPR]
                       [--filter-sql SELECTOR] [--json]
    logbus pop ack | nack POP_GROUP TOPIC HANDLE...
    logbus pop invisible POP_GROUP TOPIC HANDLE MS
    logbus pop list [--json]
    logbus dlq replay POP_GROUP [--topic T] [--max N] [--json]
    logbus mqtt clients | sessions [--json]
    logbus mqtt kick | delete-session CLIENT_ID
    logbus export parquet --topic T --out DIR [--data-dir DIR] [--include-headers]
    logbus overview | queue ... | exchange list | binding list | connection ... | consumer-group ...
    logbus user ... | vhost ... | permission ...          (cli_ops.py)

Every command but serve and export talks to the HTTP API: [--server URL] [--user U]
[--password P] (or LOGBUS_SERVER, LOGBUS_USER, LOGBUS_PASSWORD).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .config import LISTENERS, ConfigError, load_settings
from . import cli_ops
from .cli_output import duration as _ms
from .cli_output import plural as _plural
from .cli_output import Progress, printable, table
from .cli_output import size as _bytes
from .gateway.http.client import DEFAULT_SERVER, AdminClient, AdminError

# The user the HTTP API commands log in as (HTTP Basic): the first boot's default user
# unless the flags or these variables say otherwise.
USER_ENV, PASSWORD_ENV = "LOGBUS_USER", "LOGBUS_PASSWORD"
DEFAULT_USER = DEFAULT_PASSWORD = "guest"
NEVER_EXPIRES = 0xFFFFFFFF  # an MQTT session expiry interval that means "never"

PROG = "logbus"
_DETAIL = "partition_detail"
# old command names still taken, with a warning, for the new ones (decision 0040)
RENAMED = {"group": "consumer-group"}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in RENAMED:
        print(f"{PROG}: '{PROG} {argv[0]}' is now '{PROG} {RENAMED[argv[0]]}'", file=sys.stderr)
        argv[0] = RENAMED[argv[0]]
    args = build_parser().parse_args(argv)
    command: Callable[[argparse.Namespace], int] = args.command
    try:
        return command(args)
    except AdminError as exc:  # one line, no traceback: unreachable server, unknown topic, ...
        print(f"{PROG}: {error_line(exc.code, exc.message)}", file=sys.stderr)
        return 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="One broker for AMQP 0-9-1, MQTT and Kafka clients over one log."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)

    serve = commands.add_parser("serve", help="run the broker", description=(
        "Run the broker until SIGTERM/SIGINT. Settings: built-in defaults < TOML file <"
        " LOGBUS_* environment < these flags. EP is a Twisted endpoint string"
        " (tcp:PORT:interface=ADDR, ssl:..., unix:PATH) or 'off'."))
    serve.add_argument("--config", metavar="FILE", help="TOML settings file (or LOGBUS_CONFIG)")
    serve.add_argument("--data-dir", metavar="DIR", help="data directory (default ./data)")
    for name in LISTENERS:
        serve.add_argument(f"--{name.replace('_', '-')}", metavar="EP", nargs="+",
                           help=f"{name} listener endpoints (several side by side, plain and TLS), or off"
                           + (" (default: off; MQTT over WebSocket, subprotocol mqtt)" if name == "mqtt_ws" else ""))
    serve.add_argument("--default-partitions", metavar="N", help="partitions of new topics")
    serve.add_argument("--default-flush", metavar="POLICY",
                       help="flush policy of new topics: sync | interval:<ms> | none")
    serve.add_argument("--max-open-files", metavar="N", help="segment file handles kept open")
    serve.add_argument("--remote-storage", metavar="URL",
                       help="s3://BUCKET/PREFIX: where tiered topics upload sealed segments (docs/tiering.md)")
    serve.add_argument("--remote-storage-endpoint", metavar="URL",
                       help="the S3-compatible store's address (default: AWS S3)")
    serve.add_argument("--remote-cache-bytes", metavar="BYTES",
                       help="disk kept for remote segments read back (default 1 GiB)")
    serve.add_argument("--kafka-advertised", metavar="HOST:PORT",
                       help="address Kafka clients are told to connect to (default: the one they used)")
    serve.add_argument("--kafka-auto-create-topics", metavar="BOOL",
                       help="create a topic when a Kafka client first asks for it (default: true)")
    serve.add_argument("--memory-high-watermark", metavar="X",
                       help="memory alarm above this fraction of RAM (0 < X <= 1) or this many"
                            " bytes (X > 1) of process RSS (default: 0.4)")
    serve.add_argument("--disk-free-limit", metavar="BYTES",
                       help="disk alarm below this many bytes free on the data directory's"
                            " filesystem (default: 50000000)")
    serve.add_argument("--turn-pace-ms", metavar="MS",
                       help="under a steady load, append, write and dispatch the MQTT publishes read at"
                            " most once per this long, gathering several turns' reads (default: 1; 0: every turn)")
    serve.add_argument("--amqp-read-linger-ms", metavar="MS",
                       help="after a read of several AMQP frames, wait this long before reading"
                            " that connection again, to batch a pipelining client (default: 1; 0: off)")
    serve.add_argument("--amqp-read-linger-max-ms", metavar="MS",
                       help="the longest that wait grows to while the client goes on sending"
                            " during it (default: 8; at most a power of two times the shortest)")
    serve.add_argument("--amqp-max-message-size", metavar="BYTES",
                       help="largest AMQP message body accepted; a larger publish closes its channel"
                            " with 406 PRECONDITION_FAILED, as RabbitMQ (default: 134217728, 128 MiB;"
                            " at most 536870912)")
    serve.add_argument("--mqtt-max-packet-size", metavar="BYTES",
                       help="largest MQTT packet accepted; a larger one closes the connection (MQTT 5:"
                            " DISCONNECT 0x95), and MQTT 5 clients are told it (default: 16777216, 16 MiB)")
    serve.add_argument("--kafka-anonymous", metavar="off|loopback",
                       help="Kafka clients that do not authenticate (SASL) act as anonymous_user: never (the"
                            " listener asks for SASL first), or only from a loopback address (default: loopback)")
    serve.add_argument("--kafka-sasl-mechanisms", metavar="LIST",
                       help="SASL mechanisms offered to Kafka clients, comma-separated"
                            " (default: PLAIN,SCRAM-SHA-256,SCRAM-SHA-512)")
    serve.add_argument("--tls-cert-login", metavar="off|common_name|subject_alternative_name",
                       help="a client certificate verified by a TLS listener (one with caCertsDir=) logs in as"
                            " the user its common name or subject alternative name names: AMQP EXTERNAL,"
                            " MQTT and Kafka without a password (default: off)")
    serve.add_argument("--mqtt-anonymous", metavar="off|loopback",
                       help="MQTT clients without a user name act as anonymous_user: never, or only from a"
                            " loopback address (default: loopback)")
    serve.add_argument("--anonymous-user", metavar="NAME",
                       help="the user MQTT and Kafka clients without credentials act as, from loopback;"
                            " the first boot makes it with publish and consume on vhost / (default: anonymous)")
    serve.add_argument("--mqtt-max-session-expiry", metavar="SECONDS",
                       help="the longest an MQTT session outlives its connection: a 3.1.1 persistent"
                            " session's expiry, the cap on a 5.0 client's (told in CONNACK)"
                            " (default: 86400, a day; 4294967295: no cap)")
    serve.add_argument("--mqtt-max-queued-messages", metavar="COUNT",
                       help="messages waiting in one MQTT session's queue, beyond those in flight;"
                            " past it new messages are dropped for that session (default: 1000; 0: no limit)")
    serve.add_argument("--mqtt-max-inflight-messages", metavar="COUNT",
                       help="QoS 1 and 2 messages sent to an MQTT client and not yet acknowledged"
                            " (a 5.0 client's Receive Maximum may lower it) (default: 20)")
    serve.add_argument("--mqtt-receive-maximum", metavar="COUNT",
                       help="QoS 1 and 2 publishes an MQTT 5 client may leave unanswered, told in CONNACK;"
                            " more: DISCONNECT 0x93 (default: 20)")
    serve.add_argument("--handshake-timeout-ms", metavar="MS",
                       help="a new connection that has not finished its protocol's opening (AMQP: up to"
                            " connection.open; MQTT: CONNECT; HTTP: a request head) within this is closed"
                            " (default: 10000, RabbitMQ's handshake_timeout)")
    serve.add_argument("--kafka-idle-timeout-ms", metavar="MS",
                       help="a Kafka connection with no complete request for this long is closed"
                            " (default: 600000, Kafka's connections.max.idle.ms)")
    serve.add_argument("--kafka-max-in-flight", metavar="N",
                       help="requests of one Kafka connection handled before the first is answered; the"
                            " socket is not read while that many are pending (default: 1, as Kafka mutes"
                            " a connection)")
    serve.add_argument("--http-idle-timeout-ms", metavar="MS",
                       help="an HTTP keep-alive connection idle between requests for this long is closed"
                            " (default: 75000, nginx's keepalive_timeout)")
    serve.add_argument("--http-body-timeout-ms", metavar="MS",
                       help="an HTTP request body not complete this long after its head is answered 408"
                            " (default: 60000, nginx's client_body_timeout)")
    serve.add_argument("--http-metrics-auth", metavar="BOOL",
                       help="whether GET /metrics asks for the credentials of a user tagged monitoring or"
                            " administrator (default: false, open as RabbitMQ's Prometheus endpoint;"
                            " every other endpoint but /healthz always asks)")
    serve.add_argument("--pop-retry-backoff", metavar="DELAYS",
                       help="how long a pop group's message given back (nacked, or left to lapse) waits"
                            " before it comes again, per retry: levels such as '1s 5s 10s' or"
                            " 'exponential:1s:2:10m' (default: RocketMQ's 1s 5s 10s 30s 1m 2m ... 2h)")
    serve.add_argument("--pop-max-deliveries", metavar="N",
                       help="deliveries after which a pop group's message goes to %%DLQ%%<POP_GROUP> (default: 16)")
    serve.add_argument("--kafka-producer-id-expiration-ms", metavar="MS",
                       help="an idempotent producer's state is forgotten after this long without a batch"
                            " from it (Kafka's producer.id.expiration.ms; default: 86400000, 1 day)")
    serve.add_argument("--kafka-offsets-retention-ms", metavar="MS",
                       help="a consumer group with no members loses its committed offsets after this long"
                            " (Kafka's offsets.retention.minutes, 10080; default: 604800000, 7 days)")
    serve.add_argument("--queue-max-pinned-ms", metavar="MS",
                       help="a queue's messages older than this hold its topic's log past retention no longer:"
                            " they are dead-lettered or dropped when retention runs (default: 0, no bound)")
    serve.add_argument("--queue-max-pinned-bytes", metavar="BYTES",
                       help="a queue's messages hold at most this much of a topic's log past retention"
                            " (default: 0, no bound)")
    serve.add_argument("--default-user", metavar="NAME",
                       help="user created with vhost / on a fresh data directory (default: guest)")
    serve.add_argument("--default-pass", metavar="PASSWORD",
                       help="its password (default: guest; prefer LOGBUS_DEFAULT_PASS or the config file)")
    serve.add_argument("--loopback-users", metavar="NAMES",
                       help="users that may connect only from loopback, comma-separated, or none"
                            " (default: guest)")
    serve.add_argument("--log-level", metavar="LEVEL",
                       help="debug | info | warning | error | critical")
    serve.add_argument("--log-format", metavar="FORMAT",
                       help="text (one line per record, the default) | json (one JSON object per line)")
    serve.add_argument("--ready-file", metavar="FILE", type=Path,
                       help='write {"pid": ..., "<listener>": "host:port", ...} once listening')
    serve.set_defaults(command=cmd_serve)

    topic = commands.add_parser("topic", help="manage topics (over the HTTP API)")
    topic_commands = topic.add_subparsers(title="topic commands", metavar="COMMAND", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--server", metavar="URL", default=os.environ.get("LOGBUS_SERVER") or DEFAULT_SERVER,
        help=f"logbus HTTP API, a URL or host:port (default: LOGBUS_SERVER or {DEFAULT_SERVER})")
    common.add_argument("--user", metavar="NAME", default=os.environ.get(USER_ENV) or DEFAULT_USER,
                        help=f"the user to log in as (HTTP Basic; default: {USER_ENV} or {DEFAULT_USER})")
    common.add_argument("--password", metavar="PASSWORD", default=os.environ.get(PASSWORD_ENV) or DEFAULT_PASSWORD,
                        help=f"its password (default: {PASSWORD_ENV} or {DEFAULT_PASSWORD}; prefer the"
                             " variable to the flag, which ps shows)")

    create = topic_commands.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, metavar="N")
    create.add_argument("--config", metavar="KEY=VALUE", nargs="+", action="extend", default=[],
                        type=_key_value, help="topic setting, e.g. flush=none retention.ms=60000")
    create.set_defaults(command=cmd_topic_create)

    listing = topic_commands.add_parser("list", parents=[common], help="list topics")
    listing.add_argument("--json", action="store_true", help="print the API's JSON")
    listing.set_defaults(command=cmd_topic_list)

    describe = topic_commands.add_parser("describe", parents=[common], help="show one topic")
    describe.add_argument("name")
    describe.add_argument("--json", action="store_true", help="print the API's JSON")
    describe.set_defaults(command=cmd_topic_describe)

    alter = topic_commands.add_parser("alter", parents=[common], help="change a topic's settings")
    alter.add_argument("name")
    alter.add_argument("--config", metavar="KEY=VALUE", nargs="+", action="extend", required=True,
                       type=_key_value, help="topic setting to change, e.g. retention.ms=60000")
    alter.set_defaults(command=cmd_topic_alter)

    cli_ops.build_topic_search(topic_commands, common)

    delete = topic_commands.add_parser("delete", parents=[common], help="delete a topic")
    delete.add_argument("name")
    delete.add_argument("--force", action="store_true",
                        help="delete it even while queues read it (their messages in it go too)")
    delete.set_defaults(command=cmd_topic_delete)

    pop = commands.add_parser("pop", help="receive and settle messages of pop groups (over the HTTP API)",
                              description="Pop consumption (docs/consumption.md): a pop group's members receive"
                              " messages with an invisible time and settle them by receipt handle.")
    pop_commands = pop.add_subparsers(title="pop commands", metavar="COMMAND", required=True)
    receive = pop_commands.add_parser("receive", parents=[common], help="receive messages", description=(
        "Lease up to N messages of TOPIC to pop group POP_GROUP (created on first use: it gets what is"
        " appended from then on), each invisible to the pop group's other members for MS unless acked."))
    receive.add_argument("group", metavar="POP_GROUP")
    receive.add_argument("topic")
    receive.add_argument("--max", type=int, default=1, metavar="N", help="messages at most (default 1)")
    receive.add_argument("--invisible-ms", type=int, metavar="MS", help="invisible time (default 30000)")
    receive.add_argument("--member", metavar="NAME", help="the receiving member's name")
    receive.add_argument("--filter-tag", metavar="EXPR",
                         help="the pop group's tag expression from now on: TagA || TagB (docs/filters.md)")
    receive.add_argument("--filter-sql", metavar="SELECTOR",
                         help="the pop group's SQL92 selector from now on (docs/filters.md)")
    receive.add_argument("--json", action="store_true", help="print each message as a line of JSON")
    receive.set_defaults(command=cmd_pop_receive)
    for name, what in (("ack", "settle messages"), ("nack", "give messages back: they come again after the backoff")):
        settle = pop_commands.add_parser(name, parents=[common], help=what)
        settle.add_argument("group", metavar="POP_GROUP")
        settle.add_argument("topic")
        settle.add_argument("handles", nargs="+", metavar="HANDLE", help="receipt handle")
        settle.set_defaults(command=cmd_pop_settle, action=name)
    invisible = pop_commands.add_parser("invisible", parents=[common],
                                        help="change a received message's invisible time, from now")
    invisible.add_argument("group", metavar="POP_GROUP")
    invisible.add_argument("topic")
    invisible.add_argument("handle", metavar="HANDLE", help="receipt handle")
    invisible.add_argument("ms", type=int, metavar="MS", help="new invisible time from now (ms)")
    invisible.set_defaults(command=cmd_pop_invisible)
    pop_list = pop_commands.add_parser("list", parents=[common], help="list pop groups")
    pop_list.add_argument("--json", action="store_true", help="print the API's JSON")
    pop_list.set_defaults(command=cmd_pop_list)

    dlq = commands.add_parser("dlq", help="a pop group's dead letters (over the HTTP API)")
    dlq_commands = dlq.add_subparsers(title="dlq commands", metavar="COMMAND", required=True)
    replay = dlq_commands.add_parser("replay", parents=[common], help="publish dead letters again", description=(
        "Publish the records of topic %%DLQ%%<POP_GROUP> not replayed before to the topics they died in,"
        " as new messages (a fresh delivery count) that the pop group, and every queue reading those"
        " topics, gets again. Each record is replayed once."))
    replay.add_argument("group", metavar="POP_GROUP")
    replay.add_argument("--topic", metavar="T", help="only the dead letters that died in topic T")
    replay.add_argument("--max", type=int, metavar="N", help="messages at most (default: all)")
    replay.add_argument("--json", action="store_true", help="print the counts as JSON")
    replay.set_defaults(command=cmd_dlq_replay)

    mqtt = commands.add_parser("mqtt", help="MQTT clients and sessions (over the HTTP API, as an administrator)",
                               description="List the MQTT clients and sessions of a running broker, disconnect"
                               " a client, end a session (docs/mqtt.md, Administration).")
    mqtt_commands = mqtt.add_subparsers(title="mqtt commands", metavar="COMMAND", required=True)
    clients = mqtt_commands.add_parser("clients", parents=[common], help="list the connected clients")
    clients.add_argument("--json", action="store_true", help="print the API's JSON")
    clients.set_defaults(command=cmd_mqtt_list, what="clients")
    sessions = mqtt_commands.add_parser("sessions", parents=[common],
                                        help="list every session, connected or kept offline")
    sessions.add_argument("--json", action="store_true", help="print the API's JSON")
    sessions.set_defaults(command=cmd_mqtt_list, what="sessions")
    kick = mqtt_commands.add_parser("kick", parents=[common], help="disconnect a client", description=(
        "Close a connected client's connection (MQTT 5: DISCONNECT 0x98 Administrative action)."
        " Its session stays if it outlives its connection; its will, if any, is published."))
    kick.add_argument("client_id", metavar="CLIENT_ID")
    kick.set_defaults(command=cmd_mqtt_kick)
    delete_session = mqtt_commands.add_parser("delete-session", parents=[common], help="end a session", description=(
        "End a client's session: its subscriptions and queued messages go. A connected client is"
        " disconnected first (MQTT 5: DISCONNECT 0x98); its next connect opens a new session."))
    delete_session.add_argument("client_id", metavar="CLIENT_ID")
    delete_session.set_defaults(command=cmd_mqtt_delete_session)

    cli_ops.build(commands, common)

    export = commands.add_parser("export", help="export a topic's records from the log files")
    export_commands = export.add_subparsers(title="formats", metavar="FORMAT", required=True)
    parquet = export_commands.add_parser("parquet", help="one Parquet file per partition", description=(
        "Read the topic's segment files directly (no broker needed, safe beside a running one)"
        " and write <DIR>/<topic>-<partition>.parquet with the columns of the Spark `logbus`"
        " source, up to the last complete batch. Needs pyarrow, of the spark extra (`make spark`, or"
        " pip install -e '.[spark]' in the repository)."))
    parquet.add_argument("--topic", required=True, help="topic to export")
    parquet.add_argument("--out", required=True, metavar="DIR", help="output directory, or s3://BUCKET/PREFIX")
    parquet.add_argument("--data-dir", metavar="DIR",
                         help="data directory (default ./data, unless --remote is given alone)")
    parquet.add_argument("--remote", metavar="URL",
                         help="s3://BUCKET/PREFIX a broker tiers the topic to: its remote segments too")
    parquet.add_argument("--remote-endpoint", metavar="URL",
                         help="the S3-compatible store's address, for --remote and an s3:// --out")
    parquet.add_argument("--include-headers", action="store_true", help="add the headers column")
    parquet.set_defaults(command=cmd_export_parquet)
    return parser


# --- serve ------------------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    flags = {
        "config": args.config,
        "data_dir": args.data_dir,
        **{name: " ".join(eps) if (eps := getattr(args, name)) else None for name in LISTENERS},
        "default_partitions": args.default_partitions,
        "default_flush": args.default_flush,
        "max_open_files": args.max_open_files,
        "remote_storage": args.remote_storage,
        "remote_storage_endpoint": args.remote_storage_endpoint,
        "remote_cache_bytes": args.remote_cache_bytes,
        "kafka_advertised": args.kafka_advertised,
        "kafka_auto_create_topics": args.kafka_auto_create_topics,
        "memory_high_watermark": args.memory_high_watermark,
        "disk_free_limit": args.disk_free_limit,
        "turn_pace_ms": args.turn_pace_ms,
        "amqp_read_linger_ms": args.amqp_read_linger_ms,
        "amqp_read_linger_max_ms": args.amqp_read_linger_max_ms,
        "amqp_max_message_size": args.amqp_max_message_size,
        "mqtt_max_packet_size": args.mqtt_max_packet_size,
        "mqtt_anonymous": args.mqtt_anonymous,
        "anonymous_user": args.anonymous_user,
        "tls_cert_login": args.tls_cert_login,
        "kafka_anonymous": args.kafka_anonymous,
        "kafka_sasl_mechanisms": args.kafka_sasl_mechanisms,
        "mqtt_max_session_expiry": args.mqtt_max_session_expiry,
        "mqtt_max_queued_messages": args.mqtt_max_queued_messages,
        "mqtt_max_inflight_messages": args.mqtt_max_inflight_messages,
        "mqtt_receive_maximum": args.mqtt_receive_maximum,
        "handshake_timeout_ms": args.handshake_timeout_ms,
        "kafka_idle_timeout_ms": args.kafka_idle_timeout_ms,
        "kafka_max_in_flight": args.kafka_max_in_flight,
        "http_idle_timeout_ms": args.http_idle_timeout_ms,
        "http_body_timeout_ms": args.http_body_timeout_ms,
        "http_metrics_auth": args.http_metrics_auth,
        "pop_retry_backoff": args.pop_retry_backoff,
        "pop_max_deliveries": args.pop_max_deliveries,
        "kafka_producer_id_expiration_ms": args.kafka_producer_id_expiration_ms,
        "kafka_offsets_retention_ms": args.kafka_offsets_retention_ms,
        "queue_max_pinned_ms": args.queue_max_pinned_ms,
        "queue_max_pinned_bytes": args.queue_max_pinned_bytes,
        "default_user": args.default_user,
        "default_pass": args.default_pass,
        "loopback_users": args.loopback_users,
        "log_level": args.log_level,
        "log_format": args.log_format,
    }
    try:
        settings = load_settings(flags)
    except ConfigError as exc:
        print(f"{PROG}: config error: {exc}", file=sys.stderr)
        return 2
    # The reactor must be installed before server (and through it the broker) is imported.
    from .server import install_epoll_reactor

    reactor = install_epoll_reactor()
    from .server import run, setup_logging, tune_malloc

    setup_logging(settings.log_level, settings.log_format)
    tune_malloc()
    return run(settings, reactor, ready_file=args.ready_file, load=lambda: load_settings(flags))


# --- topic ------------------------------------------------------------------------------------


def cmd_topic_create(args: argparse.Namespace) -> int:
    info = _client(args).create_topic(args.name, args.partitions, dict(args.config))
    print(f"created topic {info['name']} ({_plural(info['partitions'], 'partition')})")
    return 0


def cmd_topic_list(args: argparse.Namespace) -> int:
    topics = _client(args).list_topics()
    if args.json:
        print(json.dumps(topics, indent=2))
    elif not topics:
        print("no topics")
    else:
        rows = [
            [
                t["name"],
                str(t["partitions"]),
                str(t["config"].get("flush", "")),
                _ms(t["config"].get("retention.ms")),
                str(sum(p["log_end_offset"] - p["log_start_offset"] for p in t[_DETAIL])),
                _bytes(sum(p["size_bytes"] for p in t[_DETAIL])),
            ]
            for t in sorted(topics, key=lambda t: t["name"])
        ]
        print(table(["NAME", "PARTITIONS", "FLUSH", "RETENTION", "RECORDS", "SIZE"], rows))
    return 0


def cmd_topic_describe(args: argparse.Namespace) -> int:
    info = _client(args).describe_topic(args.name)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(table([], [["topic", info["name"]], ["partitions", str(info["partitions"])]]))
    print("config:")
    config_rows = [
        [f"  {key}", str(value)]
        for key, value in sorted(info["config"].items())
        if key != "partitions"
    ]
    print(table([], config_rows))
    partitions = info.get(_DETAIL, [])
    if partitions:
        print()
        print(table(
            ["PARTITION", "START OFFSET", "END OFFSET", "SEGMENTS", "SIZE"],
            [
                [str(p["partition"]), str(p["log_start_offset"]), str(p["log_end_offset"]),
                 str(p["segments"]), _bytes(p["size_bytes"])]
                for p in partitions
            ],
        ))
    return 0


def cmd_topic_alter(args: argparse.Namespace) -> int:
    changes = dict(args.config)
    _client(args).alter_topic(args.name, changes)
    print(f"altered topic {args.name}: " + " ".join(f"{k}={v}" for k, v in changes.items()))
    return 0


def cmd_topic_delete(args: argparse.Namespace) -> int:
    _client(args).delete_topic(args.name, force=args.force)
    print(f"deleted topic {args.name}")
    return 0


def _client(args: argparse.Namespace) -> AdminClient:
    return AdminClient(args.server, auth=(args.user, args.password))


# --- pop --------------------------------------------------------------------------------------


def cmd_pop_receive(args: argparse.Namespace) -> int:
    messages = _client(args).pop_receive(args.group, args.topic, args.max, args.invisible_ms, args.member,
                                         args.filter_tag, args.filter_sql)
    if args.json:
        for m in messages:
            print(json.dumps(m))
    elif not messages:
        print("no messages")
    else:
        print(table(["HANDLE", "PARTITION", "OFFSET", "DELIVERIES", "KEY", "VALUE"],
                    [message_row(m) for m in messages]))
    return 0


def cmd_pop_settle(args: argparse.Namespace) -> int:
    client = _client(args)
    settle = client.pop_ack if args.action == "ack" else client.pop_nack
    result = settle(args.group, args.topic, args.handles)
    done, failed = result["acked"], result["failed"]
    verb = "acked" if args.action == "ack" else "nacked"
    total = len(args.handles)
    print(f"{verb} {done} of {_plural(total, 'message')}" if failed else f"{verb} {_plural(done, 'message')}")
    for f in failed:
        print(f"{PROG}: {error_line(f['error'], f['message'])}", file=sys.stderr)
    return 1 if failed else 0


def cmd_pop_invisible(args: argparse.Namespace) -> int:
    _client(args).pop_invisible(args.group, args.topic, args.handle, args.ms)
    print(f"{args.handle} invisible for {_ms(args.ms)}")
    return 0


def cmd_pop_list(args: argparse.Namespace) -> int:
    groups = _client(args).pop_groups()
    if args.json:
        print(json.dumps(groups, indent=2))
    elif not groups:
        print("no pop groups")
    else:
        print(table(["POP-GROUP", "TOPIC", "READY", "INVISIBLE", "DEAD-LETTERED", "DLQ WAITING"],
                    [[g["pop_group"], g["topic"], str(g["ready"]), str(g["invisible"]), str(g["dead_lettered"]),
                      str(g["dead_letters_waiting"])] for g in groups]))
    return 0


def cmd_dlq_replay(args: argparse.Namespace) -> int:
    if args.max is not None and args.max < 1:
        print(f"{PROG}: --max must be at least 1", file=sys.stderr)
        return 2
    client = _client(args)
    total: dict[str, Any] = {"pop_group": args.group, "replayed": 0, "topics": {}, "skipped": 0}
    bar = Progress(f"replaying %DLQ%{args.group}")
    expect = None
    if bar.on:  # the bar's total: the dead letters waiting (at most)
        waiting = [g["dead_letters_waiting"] for g in client.pop_groups() if g["pop_group"] == args.group]
        expect = min(waiting[0], args.max or waiting[0]) if waiting else None
    while True:  # the server moves a bounded number per request and says whether more are left
        left = None if args.max is None else args.max - total["replayed"]
        got = client.dlq_replay(args.group, args.topic, left)
        total["replayed"] += got["replayed"]
        total["skipped"] += got["skipped"]
        for t, n in got["topics"].items():
            total["topics"][t] = total["topics"].get(t, 0) + n
        bar.update(total["replayed"], expect)
        if not got["more"] or not got["replayed"] or left == got["replayed"]:
            break
    bar.close()
    print(json.dumps(total) if args.json else replay_summary(total))
    return 0


_HINTS = {"stale_receipt": "it was settled, its invisible time lapsed, or it was received again",
          "unauthorized": f"give a user's credentials: --user and --password, or {USER_ENV}"
                          f" and {PASSWORD_ENV}",
          "forbidden": "that user lacks the tag or the permission (docs/security.md)"}


def error_line(code: str, message: str) -> str:
    """The server's error message, with a hint for the codes that need one."""
    hint = _HINTS.get(code)
    return f"{message} ({hint})" if hint else message


def message_row(m: dict[str, Any]) -> list[str]:
    """A received message's table row: handle, partition, offset, deliveries, key, value."""
    return [m["handle"], str(m["partition"]), str(m["offset"]), str(m["deliveries"]),
            show_bytes(m, "key"), show_bytes(m, "value")]


def show_bytes(m: dict[str, Any], name: str) -> str:
    """A key or value of the API's JSON on one line: text with control characters escaped,
    ``base64:...`` for bytes that are not UTF-8, ``-`` for none."""
    if name + "_base64" in m:
        return "base64:" + str(m[name + "_base64"])
    value = m.get(name)
    if value is None:
        return "-"
    text = str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def replay_summary(result: dict[str, Any]) -> str:
    """One line for ``logbus dlq replay``."""
    dlq = "%DLQ%" + result["pop_group"]
    if result["replayed"]:
        per_topic = ", ".join(f"{t}: {n}" for t, n in sorted(result["topics"].items()))
        line = f"replayed {_plural(result['replayed'], 'message')} of {dlq} ({per_topic})"
    else:
        line = f"nothing to replay in {dlq}"
    if result["skipped"]:
        line += f"; {result['skipped']} skipped (no topic to publish them to; see the broker's log)"
    return line


# --- mqtt -------------------------------------------------------------------------------------


def cmd_mqtt_list(args: argparse.Namespace) -> int:
    client = _client(args)
    connected = args.what == "clients"
    sessions = client.mqtt_clients() if connected else client.mqtt_sessions()
    if args.json:
        print(json.dumps(sessions, indent=2))
    elif not sessions:
        print("no MQTT clients connected" if connected else "no MQTT sessions")
    else:
        print(table(["CLIENT ID", "USER", "PEER" if connected else "CONNECTED", "PROTOCOL", "EXPIRY",
                     "SUBSCRIPTIONS", "QUEUED", "IN FLIGHT"], [session_row(s) for s in sessions]))
    return 0


def cmd_mqtt_kick(args: argparse.Namespace) -> int:
    _client(args).mqtt_kick(args.client_id)
    print(f"disconnected MQTT client {printable(args.client_id)}")
    return 0


def cmd_mqtt_delete_session(args: argparse.Namespace) -> int:
    _client(args).mqtt_delete_session(args.client_id)
    print(f"deleted the MQTT session of {printable(args.client_id)}")
    return 0


def session_row(s: dict[str, Any]) -> list[str]:
    """An MQTT session's table row: client id, user, peer (or "offline"), protocol, expiry,
    subscriptions as FILTER:QOS, queued messages, messages in flight."""
    return [printable(s["client_id"]), printable(s["user"] or "-"),
            printable(s["peer"]) if s["connected"] else "offline", s["protocol"], expiry(s["expiry_interval"]),
            ", ".join(printable(f"{sub['filter']}:{sub['qos']}") for sub in s["subscriptions"]) or "-",
            str(s["queued"]), str(s["in_flight"])]


def expiry(seconds: int) -> str:
    """A session expiry interval: ``0s`` (ends with its connection), ``10m``, ``never``."""
    if seconds >= NEVER_EXPIRES:
        return "never"
    return _ms(seconds * 1000) if seconds else "0s"


# --- export -----------------------------------------------------------------------------------


def cmd_export_parquet(args: argparse.Namespace) -> int:
    try:
        from .spark.export import export_parquet
        from .spark.logfiles import LogReadError
    except ImportError as exc:
        print(f"{PROG}: export needs the spark extra (`make spark`, or pip install -e '.[spark]' in the"
              f" repository): {exc}", file=sys.stderr)
        return 1
    try:
        bar = Progress(f"exporting {args.topic}")
        from .spark.remotefiles import Location

        where = Location(args.data_dir or ("" if args.remote else "./data"), args.remote or "",
                         args.remote_endpoint or "")
        files = export_parquet(where, args.topic, args.out, include_headers=args.include_headers,
                               progress=bar.update)
        bar.close()
    except LogReadError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    for f in files:
        print(f"{f.path}: {f.records} records (offsets {f.first_offset}..{f.end_offset})")
    return 0


# --- output -----------------------------------------------------------------------------------


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("logbus")
    except PackageNotFoundError:
        return "unknown"
