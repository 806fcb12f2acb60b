"""Users (administrators only), as /api/users: the list, a form to create or update one
(its password hashed with scrypt on the broker's password thread, as ``PUT
/api/users/<name>``), a Delete button on every user but the one logged in: deleting it
would end the session in the middle of its own request, and could leave the broker
without an administrator; the API (``DELETE /api/users/<name>``) still may."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred

from ...responses import HttpError
from ...users import parse_user
from ..html import Html, action_form, field, form, table
from ..page import Page, PageAction, View


def render(view: View) -> Html:
    rows = []
    for u in view.admin.list_users():
        name = u.name
        delete: object = "(logged in)" if name == view.user else action_form(
            "/users/delete", view.csrf, "Delete", {"name": name}, describe=f"Delete user {name}", danger=True)
        rows.append((name, ", ".join(u.tags) or "(none)", u.hashing_algorithm, delete))
    return Html(table("Users", ["Name", "Tags", "Password hashing", "Action"], rows)
                + form("/users/put", view.csrf, "Add or update a user", [
                    field("name", "Name", required=True),
                    field("password", "Password", kind="password", autocomplete="new-password", required=True),
                    field("tags", "Tags", hint="comma-separated: management, policymaker, monitoring, administrator"),
                ], "Save user"))


def put(view: View) -> Deferred[str | None]:
    view.require("administer")
    name = view.arg("name")
    body = parse_user({"password": view.arg("password"), "tags": view.arg("tags", "")}, name)
    admin = view.admin

    def store(new: Any) -> str:  # a NewPassword (core/access/doors.py)
        created = admin.put_user(name, password_hash=new.password_hash, hashing_algorithm=new.hashing_algorithm,
                                  scram=new.scram, tags=body["tags"])
        return f"User {name!r} {'created' if created else 'updated'}."
    return view.admin.hash_password(body["password"]).addCallback(store)


def delete(view: View) -> str:
    view.require("administer")
    name = view.arg("name")
    if name == view.user:
        raise HttpError(409, "own_user", f"user '{name}' is the one logged in here: log in as another"
                        " administrator to delete it")
    view.admin.delete_user(name)
    return f"User {name!r} deleted."


PAGE = Page("users", "Users", render, needs="administer", refresh_seconds=0,
            actions={"put": PageAction(put), "delete": PageAction(delete)})
