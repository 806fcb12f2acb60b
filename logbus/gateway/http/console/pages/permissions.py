"""Permissions (administrators only), as /api/permissions: the list, a form to set one
user's three expressions in a vhost, a Clear button."""

from __future__ import annotations

from ...permissions import PERMS, parse_permission
from ..html import Html, action_form, field, form, table
from ..page import Page, PageAction, View


def render(view: View) -> Html:
    rows = []
    for p in view.admin.list_permissions():
        clear = action_form("/permissions/clear", view.csrf, "Clear", {"user": p.user, "vhost": p.vhost},
                            describe=f"Clear the permissions of {p.user} in vhost {p.vhost}", danger=True)
        rows.append((p.user, p.vhost, p.configure, p.write, p.read, clear))
    return Html(table("Permissions", ["User", "Vhost", "Configure", "Write", "Read", "Action"], rows)
                + form("/permissions/set", view.csrf, "Set a user's permissions in a vhost", [
                    field("user", "User", required=True), field("vhost", "Vhost", value="/", required=True),
                    field("configure", "Configure", value=".*", hint="a regular expression of resource names"),
                    field("write", "Write", value=".*"), field("read", "Read", value=".*")], "Set permissions"))


def set_permission(view: View) -> str:
    view.require("administer")
    user, vhost = view.arg("user"), view.arg("vhost")
    perms = parse_permission({p: view.arg(p, "") for p in PERMS}, vhost, user)
    created = view.admin.set_permission(user, vhost, **perms)
    return f"Permissions of {user!r} in {vhost!r} {'set' if created else 'updated'}."


def clear(view: View) -> str:
    view.require("administer")
    user, vhost = view.arg("user"), view.arg("vhost")
    view.admin.clear_permission(user, vhost)
    return f"Permissions of {user!r} in {vhost!r} cleared."


PAGE = Page("permissions", "Permissions", render, needs="administer", refresh_seconds=0,
            actions={"set": PageAction(set_permission), "clear": PageAction(clear)})
