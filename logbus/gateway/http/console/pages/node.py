"""The node (``/node``, ``monitoring``): what RabbitMQ's management UI shows of a node, from
``Admin.node()`` as ``GET /api/nodes`` answers it, in a reader's units (MiB, "3d 4h 5m")
where the API has exact numbers: the process (pid, uptime, Python, interpreter, whether
the compiled modules run), memory, disk free and file descriptors against their limits
and alarms, the alarms in force with their thresholds, the state store's and the log's
bytes on disk, and each listener: its address, TLS, since when it listens, or why not.
Reloaded every 5 s like every page: nothing here costs more than a directory listing
(the state store's size is measured at most every 5 s)."""

from __future__ import annotations

from typing import Any

from ..html import Html, duration, h, size, table
from ..page import Page, View


def when(iso: str | None) -> str:
    """"2026-12-06T15:51:34.123Z" as "2026-12-06 15:51:34 UTC"."""
    return "" if not iso else iso[:19].replace("T", " ") + " UTC"


def watermark(node: dict[str, Any]) -> str:
    """The memory limit and how it was set: "6.2 GiB (40% of 15.5 GiB of RAM)"."""
    w = node["memory_high_watermark"]
    how = f"{w * 100:g}% of {size(node['total_memory'])} of RAM" if w <= 1 else "set in bytes"
    return f"{size(node['mem_limit'])} ({how})"


def threshold(alarm: dict[str, Any]) -> str:
    """An alarm in force and its threshold: "disk: 12.0 MiB free, below the limit of 47.7 MiB"."""
    if alarm["resource"] == "memory":
        return f"memory: {size(alarm['value'])} used, above the limit of {size(alarm['limit'])}"
    return f"{alarm['resource']}: {size(alarm['value'])} free, below the limit of {size(alarm['limit'])}"


def alarm(on: bool) -> Html:
    return Html('<span class="problem">set</span>') if on else Html('<span class="ok">none</span>')


def render(view: View) -> Html:
    node = view.admin.node()
    compiled = "compiled (mypyc)" if node["compiled"] else "pure Python"
    alarms = [threshold(a) for a in node["resource_alarms"]]
    # the other reasons the broker does not serve as it should (storage faults, listeners)
    problems = [r for r in node["health"] if not any(r.startswith(f"{a['resource']} alarm:")
                                                     for a in node["resource_alarms"])]

    def listing(items: list[str], empty: str) -> Html:
        if not items:
            return Html(f'<span class="ok">{h(empty)}</span>')
        return Html('<ul class="problem">' + "".join(f"<li>{h(i)}</li>" for i in items) + "</ul>")

    facts = (f'<dl class="facts" id="node-facts"><dt>Node</dt><dd>{h(node["name"])}</dd>'
             f'<dt>Version</dt><dd>{h(node["product_version"])}</dd>'
             f'<dt>Up for</dt><dd id="node-uptime">{h(duration(node["uptime"] / 1000))}</dd>'
             f'<dt>Started</dt><dd>{h(when(node["started_at"]))}</dd>'
             f'<dt>Process id</dt><dd>{h(node["os_pid"])}</dd>'
             f'<dt>Python</dt><dd>{h(node["python_implementation"])} {h(node["python_version"])}</dd>'
             f'<dt>Interpreter</dt><dd>{h(node["interpreter"])}</dd>'
             f'<dt>Build</dt><dd>{h(compiled)}: {h(node["build"])}</dd>'
             f'<dt>Processors</dt><dd>{node["processors"]}</dd>'
             f'<dt>Alarms</dt><dd id="node-alarms">{listing(alarms, "none")}</dd>'
             f'<dt>Problems</dt><dd id="node-problems">{listing(problems, "none")}</dd></dl>')
    fd_total = node["fd_total"]
    resources = table("Resources", ["Resource", "Now", "Limit", "Alarm"], [
        ("Memory used (resident)", size(node["mem_used"]), watermark(node), alarm(node["mem_alarm"])),
        ("Disk free (the data directory's filesystem)", size(node["disk_free"]), size(node["disk_free_limit"]),
         alarm(node["disk_free_alarm"])),
        ("File descriptors used", node["fd_used"], "unlimited" if fd_total is None else fd_total, "no alarm"),
    ])
    storage = table("Bytes on disk", ["What", "Directory", "Size"], [
        ("State store (RocksDB)", node["db_dir"], size(node["state_store_bytes"])),
        ("Log (every topic)", node["log_dir"], size(node["log_bytes"])),
    ], numeric=(2,))
    listeners = table("Listeners", ["Listener", "Protocol", "Address", "TLS", "Listening since", "Up for", "Problem"], [
        (x["name"], x["protocol"], x["address"], "yes" if x["tls"] else "no", when(x["started_at"]),
         "" if x["uptime"] is None else duration(x["uptime"] / 1000), x["problem"] or "none")
        for x in node["listeners"]], empty="none.")
    return Html(facts + resources + storage + listeners)


PAGE = Page("node", "Node", render, needs="monitor")
