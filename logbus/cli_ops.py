"""The operator's commands of the CLI, over the HTTP API, with tables like rabbitmqctl's
and kafka-consumer-groups' (aligned columns; ``--json`` prints the API's JSON):

    logbus overview
    logbus topic search TOPIC [--key K | --message-id ID] [--from T] [--to T]
    logbus queue list [--vhost V] [--kind K] | purge NAME | get NAME [--count N]
    logbus exchange list [--vhost V]    logbus binding list [--vhost V]
    logbus connection list [--protocol P] | close ID
    logbus consumer-group list | describe CONSUMER_GROUP
    logbus consumer-group reset-offsets CONSUMER_GROUP --to-earliest ... [--execute]
    logbus user list | add NAME [--tags T] | delete NAME
    logbus vhost list | add NAME | delete NAME
    logbus permission list | set VHOST USER [--configure RE --write RE --read RE] | clear VHOST USER

``build`` adds them to the parser ``cli.py`` makes; ``cli.main`` turns an AdminError into
one line on stderr. "Consumer group" is Kafka's, "pop group" the pop API's (decision 0040):
``logbus group`` is taken for ``logbus consumer-group`` with a warning (``cli.main``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from typing import Any

from .cli_output import duration, plural, printable, table
from .gateway.http.client import AdminClient

PROTOCOLS = ("amqp", "mqtt", "kafka", "http")
KINDS = ("classic", "session", "shared", "pop")
PASSWORD_ENV = "LOGBUS_NEW_PASSWORD"


def build_topic_search(topic_commands: Any, common: argparse.ArgumentParser) -> None:
    p = topic_commands.add_parser("search", parents=[common], help="find a topic's messages by key, id or time",
                                  description="Records of TOPIC with a key (or message id), or a timestamp in a"
                                  " range, found through the topic's key and time indexes (docs/operations.md).")
    p.add_argument("name", metavar="TOPIC")
    p.add_argument("--key", help="the record key (UTF-8 text)")
    p.add_argument("--message-id", metavar="ID", help="the message id (AMQP message-id)")
    p.add_argument("--from", dest="start", type=_when, metavar="TIME", help="ISO 8601 time or epoch ms")
    p.add_argument("--to", dest="end", type=_when, metavar="TIME", help="ISO 8601 time or epoch ms")
    p.add_argument("--partition", type=int, metavar="P")
    p.add_argument("--limit", type=int, metavar="N", help="records at most (default 100)")
    p.add_argument("--json", action="store_true", help="print the API's JSON")
    p.set_defaults(command=cmd_topic_search)


def _when(text: str) -> int:
    if text.isdigit():
        return int(text)
    return _datetime(text)[1]


def cmd_topic_search(args: argparse.Namespace) -> int:
    answer = _client(args).search(args.name, key=None if args.key is None else args.key.encode(),
                                  message_id=args.message_id, start_ms=args.start, end_ms=args.end,
                                  partition=args.partition, limit=args.limit)
    found = answer["messages"]
    if args.json:
        _json(answer)
    elif not found:
        print("no messages found")
    else:
        def show(value: Any, encoding: Any) -> str:
            if value is None:
                return "-"
            return ("base64:" if encoding == "base64" else "") + printable(str(value)[:60])

        print(table(["PARTITION", "OFFSET", "TIME", "KEY", "MESSAGE ID", "VALUE"],
                    [[str(m["partition"]), str(m["offset"]), _stamp(m["timestamp_ms"]),
                      show(m["key"], m["key_encoding"]), printable(m["message_id"] or "-"),
                      show(m["payload"], m["payload_encoding"])] for m in found]))
        if answer["truncated"]:
            print(f"\nfirst {len(found)} shown, more match")
    return 0


def _stamp(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def build(commands: Any, common: argparse.ArgumentParser) -> None:
    def command(group: Any, name: str, help: str, func: Any, json_flag: bool = True, **kw: Any) -> Any:
        p = group.add_parser(name, parents=[common], help=help, **kw)
        if json_flag:
            p.add_argument("--json", action="store_true", help="print the API's JSON")
        p.set_defaults(command=func)
        return p

    def family(name: str, help: str) -> Any:
        p = commands.add_parser(name, help=help)
        return p.add_subparsers(title=f"{name} commands", metavar="COMMAND", required=True)

    command(commands, "overview", "the broker at a glance: connections, queues, messages, alarms", cmd_overview)

    queue = family("queue", "queues of every kind: AMQP queues, MQTT sessions, pop groups (over the HTTP API)")
    p = command(queue, "list", "list queues with their messages and consumers", cmd_queue_list)
    p.add_argument("--vhost", metavar="V", help="only this vhost's ('~': pop groups)")
    p.add_argument("--kind", choices=KINDS, help="only this kind")
    p = command(queue, "purge", "drop a queue's ready messages", cmd_queue_purge, json_flag=False)
    p.add_argument("name")
    p.add_argument("--vhost", metavar="V", default="/", help="its vhost (default /; '~': a pop group)")
    p = command(queue, "get", "show a queue's first ready messages without taking them", cmd_queue_get)
    p.add_argument("name")
    p.add_argument("--vhost", metavar="V", default="/", help="its vhost (default /; '~': a pop group)")
    p.add_argument("--count", type=int, default=10, metavar="N", help="messages at most (default 10)")

    for name, what in (("exchange", "exchanges"), ("binding", "bindings")):
        group = family(name, f"the {what} of each vhost (over the HTTP API)")
        p = command(group, "list", f"list {what}", cmd_listing)
        p.add_argument("--vhost", metavar="V", help="only this vhost's")
        p.set_defaults(what=what)

    connection = family("connection", "client connections of every protocol (over the HTTP API)")
    p = command(connection, "list", "list open connections", cmd_connection_list)
    p.add_argument("--protocol", choices=PROTOCOLS, help="only this protocol's")
    p = command(connection, "close", "close a connection in its protocol's terms", cmd_connection_close,
                json_flag=False)
    p.add_argument("id", type=int, metavar="ID", help="its id, as connection list shows it")

    group = family("consumer-group", "Kafka consumer groups: members, committed offsets, lag (over the HTTP API)")
    command(group, "list", "list consumer groups with their state and total lag", cmd_group_list)
    p = command(group, "describe", "a consumer group's partitions: committed offset, log end, lag, owner",
                cmd_group_describe, description=(
                    "Every partition of each topic the consumer group committed on or is assigned. The lag"
                    " of a partition with no committed offset (uncommitted) counts from the log start, as a"
                    " new consumer with auto.offset.reset=earliest reads it; the total includes it."))
    p.add_argument("group", metavar="CONSUMER_GROUP")
    p = command(group, "reset-offsets", "move a consumer group's committed offsets (a dry run unless --execute)",
                cmd_group_reset, description=(
                    "As kafka-consumer-groups --reset-offsets: prints the new offsets, and commits them"
                    " only with --execute. The consumer group must have no members."))
    p.add_argument("group", metavar="CONSUMER_GROUP")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", dest="to", action="store_const", const=("earliest", None))
    to.add_argument("--to-latest", dest="to", action="store_const", const=("latest", None))
    to.add_argument("--to-offset", dest="to", type=lambda v: ("offset", int(v)), metavar="N")
    to.add_argument("--shift-by", dest="to", type=lambda v: ("shift", int(v)), metavar="N")
    to.add_argument("--to-datetime", dest="to", type=_datetime, metavar="YYYY-MM-DDTHH:MM:SS[.sss][+HH:MM]",
                    help="the first offset at or after this time (UTC unless the offset is given)")
    p.add_argument("--topic", action="append", metavar="T", help="every partition of topic T (repeatable;"
                   " default: the partitions the consumer group has committed)")
    p.add_argument("--execute", action="store_true", help="commit the new offsets (default: a dry run)")

    user = family("user", "users (over the HTTP API, as an administrator)")
    command(user, "list", "list users and their tags", cmd_user_list)
    p = command(user, "add", f"add or change a user (the password from {PASSWORD_ENV}, else asked)", cmd_user_add,
                json_flag=False)
    p.add_argument("name")
    p.add_argument("--tags", default="", help="comma-separated: management, policymaker, monitoring, administrator")
    p = command(user, "delete", "delete a user (its AMQP connections are closed)", cmd_user_delete, json_flag=False)
    p.add_argument("name")

    vhost = family("vhost", "virtual hosts (over the HTTP API)")
    command(vhost, "list", "list vhosts", cmd_vhost_list)
    p = command(vhost, "add", "add a vhost", cmd_vhost_add, json_flag=False)
    p.add_argument("name")
    p.add_argument("--description", default="")
    p = command(vhost, "delete", "delete a vhost with its queues and exchanges", cmd_vhost_delete, json_flag=False)
    p.add_argument("name")

    permission = family("permission", "users' permissions per vhost (over the HTTP API, as an administrator)")
    command(permission, "list", "list permissions", cmd_permission_list)
    p = command(permission, "set", "set a user's permissions in a vhost", cmd_permission_set, json_flag=False)
    p.add_argument("vhost")
    p.add_argument("who", metavar="USER")  # not "user": --user is who logs in
    for perm in ("configure", "write", "read"):
        p.add_argument(f"--{perm}", default=".*", metavar="REGEX", help=f"{perm} permission (default .*)")
    p = command(permission, "clear", "remove a user's permissions in a vhost", cmd_permission_clear, json_flag=False)
    p.add_argument("vhost")
    p.add_argument("who", metavar="USER")


def _client(args: argparse.Namespace) -> AdminClient:
    return AdminClient(args.server, auth=(args.user, args.password))


def _json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def _datetime(text: str) -> tuple[str, int]:
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an ISO 8601 time, got {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return "datetime", int(when.timestamp() * 1000)


# --- overview ---------------------------------------------------------------------------------


def cmd_overview(args: argparse.Namespace) -> int:
    o = _client(args).overview()
    if args.json:
        _json(o)
        return 0
    totals = o["object_totals"]
    q = o["queue_totals"]
    rows = [["version", f"{o['product_name']} {o['product_version']}"],
            ["uptime", duration(o["uptime_ms"] // 1000 * 1000)],
            ["connections", "  ".join(f"{p} {n}" for p, n in o["connections_by_protocol"].items())],
            ["queues", f"{totals['queues']} ({q['messages_ready']} ready, {q['messages_unacknowledged']} unacked,"
                       f" {q['messages_scheduled']} scheduled)"],
            ["topics", str(totals["topics"])], ["consumer groups", str(totals["consumer_groups"])],
            ["memory", f"{o['mem_used'] >> 20} MiB"], ["descriptors", str(o["fd_used"])],
            ["disk free", f"{o['disk_free'] >> 20} MiB"], ["alarms", ", ".join(o["alarms"]) or "none"]]
    print(table([], rows))
    print()
    print(table(["PROTOCOL", "RECEIVED", "CONFIRMED", "SENT", "ROUTED", "DELIVERED", "REDELIVERED", "ACKED",
                 "DEAD-LETTERED"],
                [[p, *(str(m[k]) for k in ("received", "confirmed", "sent", "routed", "delivered", "redelivered",
                                           "acked", "dead_lettered"))] for p, m in o["message_totals"].items()]))
    return 0


# --- queues -----------------------------------------------------------------------------------


def cmd_queue_list(args: argparse.Namespace) -> int:
    queues = _client(args).list_queues(args.vhost)
    if args.kind:
        queues = [q for q in queues if q["kind"] == args.kind]
    if args.json:
        _json(queues)
    elif not queues:
        print("no queues")
    else:
        print(table(["VHOST", "NAME", "KIND", "READY", "UNACKED", "SCHEDULED", "CONSUMERS"],
                    [[printable(q["vhost"] or "~"), printable(q["name"]), q["kind"], str(q["messages_ready"]),
                      str(q["messages_unacknowledged"]), str(q["messages_scheduled"]), str(q["consumers"])]
                     for q in queues]))
    return 0


def cmd_queue_purge(args: argparse.Namespace) -> int:
    client = _client(args)
    before = client.queue(args.vhost, args.name)["messages_ready"]
    client.purge_queue(args.vhost, args.name)
    print(f"purged {plural(before, 'message')} from queue {printable(args.name)}")
    return 0


def cmd_queue_get(args: argparse.Namespace) -> int:
    messages = _client(args).get_messages(args.vhost, args.name, args.count)
    if args.json:
        _json(messages)
    elif not messages:
        print("no ready messages")
    else:
        print(table(["#", "ROUTING KEY", "MESSAGE ID", "REDELIVERED", "PAYLOAD"],
                    [[str(m["position"]), printable(m["routing_key"] or "-"), printable(m["message_id"] or "-"),
                      "yes" if m["redelivered"] else "no",
                      ("base64:" if m["payload_encoding"] == "base64" else "") + printable(m["payload"][:60])]
                     for m in messages]))
    return 0


def cmd_listing(args: argparse.Namespace) -> int:
    client = _client(args)
    rows = (client.list_exchanges if args.what == "exchanges" else client.list_bindings)(args.vhost)
    if args.json:
        _json(rows)
    elif not rows:
        print(f"no {args.what}")
    elif args.what == "exchanges":
        print(table(["VHOST", "NAME", "TYPE", "DURABLE", "TOPIC"],
                    [[printable(e["vhost"]), printable(e["name"] or "(default)"), e["type"],
                      "yes" if e["durable"] else "no", printable(e["topic"])] for e in rows]))
    else:
        print(table(["VHOST", "SOURCE", "DESTINATION", "TYPE", "ROUTING KEY"],
                    [[printable(b["vhost"]), printable(b["source"] or "(default)"), printable(b["destination"]),
                      b["destination_type"], printable(b["routing_key"])] for b in rows]))
    return 0


# --- connections ------------------------------------------------------------------------------


def cmd_connection_list(args: argparse.Namespace) -> int:
    conns = _client(args).list_connections(args.protocol)
    if args.json:
        _json(conns)
    elif not conns:
        print("no connections")
    else:
        print(table(["ID", "PROTOCOL", "PEER", "USER", "VHOST", "CLIENT", "PRODUCT", "VERSION", "TLS", "CONNECTED AT",
                     "IN", "OUT", "BYTES IN", "BYTES OUT"],
                    [[str(c["id"]), c["protocol"], c["peer"], printable(c["user"] or "-"),
                      printable(c["vhost"] or "-"), printable(c["client_id"] or "-"),
                      printable(c["client_product"] or "-"), printable(c["client_version"] or "-"),
                      "yes" if c["tls"] else "no", c["connected_at"], str(c["received"]), str(c["sent"]),
                      str(c["bytes_in"]), str(c["bytes_out"])] for c in conns]))
    return 0


def cmd_connection_close(args: argparse.Namespace) -> int:
    _client(args).close_connection(args.id)
    print(f"closed connection {args.id}")
    return 0


# --- consumer groups --------------------------------------------------------------------------


def _offset(n: Any) -> str:
    return "-" if n is None else str(n)


def cmd_group_list(args: argparse.Namespace) -> int:
    groups = _client(args).list_groups()
    if args.json:
        _json(groups)
    elif not groups:
        print("no consumer groups")
    else:
        print(table(["CONSUMER-GROUP", "STATE", "MEMBERS", "PARTITIONS", "UNCOMMITTED", "LAG"],
                    [[printable(g["consumer_group"]), g["state"], str(len(g["members"])), str(len(g["partitions"])),
                      str(g["uncommitted_partitions"]), str(g["lag"])] for g in groups]))
    return 0


def cmd_group_describe(args: argparse.Namespace) -> int:
    g = _client(args).describe_group(args.group)
    if args.json:
        _json(g)
        return 0
    name = printable(g["consumer_group"])
    uncommitted = [p for p in g["partitions"] if p["uncommitted"]]
    note = (f" ({sum(p['lag'] for p in uncommitted)} of it on {plural(len(uncommitted), 'uncommitted partition')},"
            " counted from the log start)") if uncommitted else ""
    print(f"consumer group {name}: {g['state']}, {plural(len(g['members']), 'member')}, lag {g['lag']}{note}")
    if g["partitions"]:
        print()
        print(table(["CONSUMER-GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                     "HOST", "CLIENT-ID"],
                    [[name, printable(p["topic"]), str(p["partition"]),
                      "uncommitted" if p["uncommitted"] else str(p["committed_offset"]),
                      str(p["log_end_offset"]), str(p["lag"]), printable(p["member_id"] or "-"),
                      printable(p["host"] or "-"), printable(p["client_id"] or "-")] for p in g["partitions"]]))
    return 0


def cmd_group_reset(args: argparse.Namespace) -> int:
    to, value = args.to
    plan = _client(args).reset_offsets(args.group, to, value, args.topic, args.execute)
    if args.json:
        _json(plan)
        return 0
    print(table(["CONSUMER-GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
                [[printable(args.group), printable(r["topic"]), str(r["partition"]), _offset(r["current_offset"]),
                  str(r["new_offset"])] for r in plan]))
    if not args.execute:
        print("\n(a dry run: nothing changed; add --execute to commit these offsets)", file=sys.stderr)
    return 0


# --- users, vhosts, permissions ---------------------------------------------------------------


def cmd_user_list(args: argparse.Namespace) -> int:
    users = _client(args).list_users()
    if args.json:
        _json(users)
    else:
        print(table(["USER", "TAGS"], [[printable(u["name"]), ",".join(u["tags"]) or "-"] for u in users]))
    return 0


def cmd_user_add(args: argparse.Namespace) -> int:
    password = os.environ.get(PASSWORD_ENV)
    if password is None:
        import getpass
        password = getpass.getpass(f"password for {args.name}: ")
    _client(args).put_user(args.name, password, args.tags)
    print(f"user {printable(args.name)} set" + (f" (tags {args.tags})" if args.tags else ""))
    return 0


def cmd_user_delete(args: argparse.Namespace) -> int:
    _client(args).delete_user(args.name)
    print(f"deleted user {printable(args.name)}")
    return 0


def cmd_vhost_list(args: argparse.Namespace) -> int:
    vhosts = _client(args).list_vhosts()
    if args.json:
        _json(vhosts)
    else:
        print(table(["VHOST", "DESCRIPTION"], [[printable(v["name"]), printable(v["description"] or "-")]
                                                for v in vhosts]))
    return 0


def cmd_vhost_add(args: argparse.Namespace) -> int:
    _client(args).put_vhost(args.name, args.description)
    print(f"vhost {printable(args.name)} added")
    return 0


def cmd_vhost_delete(args: argparse.Namespace) -> int:
    _client(args).delete_vhost(args.name)
    print(f"deleted vhost {printable(args.name)}")
    return 0


def cmd_permission_list(args: argparse.Namespace) -> int:
    perms = _client(args).list_permissions()
    if args.json:
        _json(perms)
    else:
        print(table(["VHOST", "USER", "CONFIGURE", "WRITE", "READ"],
                    [[printable(p["vhost"]), printable(p["user"]), printable(p["configure"]), printable(p["write"]),
                      printable(p["read"])] for p in perms]))
    return 0


def cmd_permission_set(args: argparse.Namespace) -> int:
    _client(args).set_permissions(args.vhost, args.who, args.configure, args.write, args.read)
    print(f"permissions of {printable(args.who)} in vhost {printable(args.vhost)} set")
    return 0


def cmd_permission_clear(args: argparse.Namespace) -> int:
    _client(args).clear_permissions(args.vhost, args.who)
    print(f"permissions of {printable(args.who)} in vhost {printable(args.vhost)} cleared")
    return 0
