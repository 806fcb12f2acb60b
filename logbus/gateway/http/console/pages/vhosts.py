"""Virtual hosts, as /api/vhosts: those the user has a permission in (monitoring: all);
an administrator may create and delete them."""

from __future__ import annotations

from ...vhosts import parse_vhost
from ..html import Html, action_form, field, form, table
from ..page import Page, PageAction, View


def render(view: View) -> Html:
    admin = view.can("administer")
    rows = []
    for v in view.admin.list_vhosts():
        if not view.doors.sees_vhost(view.user, v.name):
            continue
        delete: object = ""
        if admin:
            delete = action_form("/vhosts/delete", view.csrf, "Delete", {"name": v.name},
                                 describe=f"Delete vhost {v.name}", danger=True)
        rows.append((v.name, v.description, ", ".join(v.tags), delete))
    out = table("Virtual hosts", ["Name", "Description", "Tags", "Action"], rows)
    if admin:
        out = Html(out + form("/vhosts/put", view.csrf, "Add a virtual host", [
            field("name", "Name", required=True), field("description", "Description"),
            field("tags", "Tags", hint="comma-separated")], "Save virtual host"))
    return out


def put(view: View) -> str:
    view.require("administer")
    name = view.arg("name")
    body = parse_vhost({"description": view.arg("description", ""), "tags": view.arg("tags", "") or None}, name)
    created = view.admin.create_vhost(name, **body)
    return f"Vhost {name!r} {'created' if created else 'updated'}."


def delete(view: View) -> str:
    view.require("administer")
    name = view.arg("name")
    view.admin.delete_vhost(name)
    return f"Vhost {name!r} deleted."


PAGE = Page("vhosts", "Virtual hosts", render, nav="Vhosts", refresh_seconds=0,
            actions={"put": PageAction(put), "delete": PageAction(delete)})
