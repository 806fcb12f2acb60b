"""Kafka's ACL APIs (DescribeAcls, CreateAcls, DeleteAcls) as a view of logbus's
permissions, and a way to change them: there is one permission model (docs/security.md),
so an ACL created here takes effect on AMQP, MQTT and HTTP too.

A logbus permission is three regular expressions (configure, write, read) per user and
vhost, searched in an exchange's or a queue's name. Each expression is read as a list of
alternatives (``a|b|c``); an alternative of one of these forms is an ACL binding:

=================  ===========================  =========================================
alternative        TOPIC binding (vhost v)      GROUP binding (vhost ``/`` only)
=================  ===========================  =========================================
``.*``             ``*`` LITERAL (in ``/``),    ``*`` LITERAL
                   ``v@`` PREFIXED elsewhere
``^name$``         the topic of exchange        group ``name``
                   ``name`` LITERAL
``^prefix``        the topic prefix PREFIXED    groups ``prefix`` PREFIXED
=================  ===========================  =========================================

with the operations of the expression: read is READ (topic and group), write is WRITE
(topic), configure is CREATE, DELETE, ALTER and ALTER_CONFIGS on the topic and DELETE on
the group. The principal is ``User:<name>``, the host ``*``, the permission ALLOW. Other
alternatives (any other regular expression) are not shown and not changed here.

Creating an ACL adds its alternative to the expression of its operation (ALL: all
three); DESCRIBE and DESCRIBE_CONFIGS, which every operation implies, are accepted when
the request or the user's permissions grant another operation on the same resource.
Deleting removes the alternative: for configure, every operation that stands for it. What
the model cannot say is refused with INVALID_REQUEST (42) and a message: DENY, a host
other than ``*``, a principal type other than ``User``, cluster and transactional-id
resources (cluster rights are the ``administrator`` tag), a group in another vhost.
These APIs are an administrator's (else CLUSTER_AUTHORIZATION_FAILED, 31), as RabbitMQ's
permissions endpoints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

from kafka.protocol.admin.acl import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)

from ...core.errors import LogbusError
from ...core.types import DEFAULT_EXCHANGE_TOPIC, topic_exchange, vhost_topic
from . import errors as K
from .caller import Caller
from .codec import Request
from .operations import (
    ALTER,
    ALTER_CONFIGS,
    CLUSTER_ACTION,
    CREATE,
    DELETE,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    READ,
    WRITE,
)

if TYPE_CHECKING:
    from ...core.ports import Acls
    from .handlers import KafkaHandlers

# Kafka's enums (org.apache.kafka.common.resource / acl)
ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4  # pattern types (ANY: also for the other enums' "any")
TOPIC, GROUP, CLUSTER = 2, 3, 4  # resource types
ALLOW = 3  # permission type
ALL = 2  # operation
PRINCIPAL = "User:"
VHOST_ROOT = "/"
PERMS = ("configure", "write", "read")
TOPIC_OPS = {"read": (READ,), "write": (WRITE,), "configure": (CREATE, DELETE, ALTER, ALTER_CONFIGS)}
GROUP_OPS = {"read": (READ,), "configure": (DELETE,)}
_META = set(".^$*+?{}[]|()\\")


class AclRefused(Exception):
    """A binding the permission model cannot hold."""


@dataclass(frozen=True, slots=True)
class Alt:
    """One alternative of a permission expression: ``kind`` "any", "literal" or "prefix"."""

    kind: str
    name: str = ""

    def regex(self) -> str:
        if self.kind == "any":
            return ".*"
        return "^" + re.escape(self.name) + ("$" if self.kind == "literal" else "")


@dataclass(frozen=True, slots=True)
class Binding:
    resource_type: int
    name: str
    pattern: int
    user: str
    operation: int

    @property
    def principal(self) -> str:
        return PRINCIPAL + self.user


# -- expressions as alternatives ---------------------------------------------------------------


def split_alternatives(expression: str) -> list[str]:
    """The top-level alternatives of a regular expression ("" has none)."""
    if not expression:
        return []
    out, depth, cls, esc, start = [], 0, False, False, 0
    for i, ch in enumerate(expression):
        if esc:
            esc = False
        elif ch == "\\":
            esc = True
        elif cls:
            cls = ch != "]"
        elif ch == "[":
            cls = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            out.append(expression[start:i])
            start = i + 1
    out.append(expression[start:])
    return out


def _plain(text: str) -> str | None:
    """``text`` with its escapes undone, or None if it has a regular expression operator."""
    out, esc = [], False
    for ch in text:
        if esc:
            if ch.isalnum():
                return None  # \d, \w, ...: a class, not a character
            out.append(ch)
            esc = False
        elif ch == "\\":
            esc = True
        elif ch in _META:
            return None
        else:
            out.append(ch)
    return None if esc else "".join(out)


def parse_alternative(alt: str) -> Alt | None:
    if alt in (".*", "^.*", "^.*$"):
        return Alt("any")
    if not alt.startswith("^"):
        return None
    backslashes = len(alt[:-1]) - len(alt[:-1].rstrip("\\"))
    literal = alt.endswith("$") and backslashes % 2 == 0  # an escaped "$" is a character, not the end
    name = _plain(alt[1:-1] if literal else alt[1:])
    if name is None:
        return None
    return Alt("literal" if literal else "prefix", name)


def alternatives(expression: str) -> list[tuple[str, Alt | None]]:
    """(text, parsed or None) of each alternative of ``expression``."""
    return [(a, parse_alternative(a)) for a in split_alternatives(expression)]


def with_alternative(expression: str, alt: Alt) -> str:
    if any(parsed == alt for _, parsed in alternatives(expression)):
        return expression
    return alt.regex() if not expression else expression + "|" + alt.regex()


def without_alternative(expression: str, alt: Alt) -> str:
    return "|".join(text for text, parsed in alternatives(expression) if parsed != alt)


# -- permissions <-> bindings ------------------------------------------------------------------


def topic_pattern(vhost: str, alt: Alt) -> tuple[str, int]:
    """The topic name and pattern type of an exchange alternative of ``vhost``."""
    if alt.kind == "any":
        return ("*", LITERAL) if vhost == VHOST_ROOT else (vhost_topic(vhost, ""), PREFIXED)
    name = DEFAULT_EXCHANGE_TOPIC if alt.kind == "literal" and alt.name == "amq.default" else alt.name
    return vhost_topic(vhost, name), LITERAL if alt.kind == "literal" else PREFIXED


def bindings(permissions: Iterable[Any]) -> list[Binding]:
    """Every binding the permissions say (``Permission`` objects: user, vhost, configure,
    write, read)."""
    out: list[Binding] = []
    for p in permissions:
        for perm in PERMS:
            for _, alt in alternatives(getattr(p, perm)):
                if alt is None:
                    continue
                name, pattern = topic_pattern(p.vhost, alt)
                out += [Binding(TOPIC, name, pattern, p.user, op) for op in TOPIC_OPS[perm]]
                if p.vhost == VHOST_ROOT and perm in GROUP_OPS:
                    group = "*" if alt.kind == "any" else alt.name
                    pattern = LITERAL if alt.kind != "prefix" else PREFIXED
                    out += [Binding(GROUP, group, pattern, p.user, op) for op in GROUP_OPS[perm]]
    return out


def target(resource_type: int, name: str, pattern: int) -> tuple[str, Alt]:
    """(vhost, alternative) a TOPIC or GROUP resource pattern stands for."""
    if pattern not in (LITERAL, PREFIXED):
        raise AclRefused(f"pattern type {pattern}: logbus holds LITERAL and PREFIXED ACLs")
    if resource_type == GROUP:
        if name == "*" and pattern == LITERAL:
            return VHOST_ROOT, Alt("any")
        return VHOST_ROOT, Alt("literal" if pattern == LITERAL else "prefix", name)
    if resource_type != TOPIC:
        raise AclRefused("logbus ACLs are on topics and groups; cluster rights are the administrator tag")
    if name == "*" and pattern == LITERAL:
        return VHOST_ROOT, Alt("any")
    vhost, exchange = topic_exchange(name)
    if pattern == PREFIXED and vhost != VHOST_ROOT and exchange == "":
        if name.endswith("@") and name.count("@") == 1:
            return vhost, Alt("any")  # "prod@": every topic of vhost prod
    if pattern == LITERAL and exchange == "":
        exchange = "amq.default"
    return vhost, Alt("literal" if pattern == LITERAL else "prefix", exchange)


def perms_for(resource_type: int, operation: int) -> tuple[str, ...]:
    """The permissions an operation is granted by (empty: DESCRIBE, implied by any)."""
    if operation == ALL:
        return PERMS if resource_type == TOPIC else ("configure", "read")
    if operation in (DESCRIBE, DESCRIBE_CONFIGS):
        return ()
    if resource_type == GROUP:
        if operation == READ:
            return ("read",)
        if operation == DELETE:
            return ("configure",)
        raise AclRefused(f"operation {operation} on a group: logbus groups know READ, DESCRIBE and DELETE")
    if operation == READ:
        return ("read",)
    if operation == WRITE:
        return ("write",)
    if operation in (CREATE, DELETE, ALTER, ALTER_CONFIGS):
        return ("configure",)
    raise AclRefused(f"operation {operation} on a topic is not a logbus permission"
                     + (" (cluster actions are the administrator tag)" if operation == CLUSTER_ACTION else ""))


def check_binding(principal: str, host: str, permission_type: int) -> str:
    """The user a creation names, or AclRefused."""
    if permission_type != ALLOW:
        raise AclRefused("logbus permissions only allow: DENY ACLs cannot be held")
    if host != "*":
        raise AclRefused(f"host {host!r}: logbus permissions apply from every host ('*')")
    if not principal.startswith(PRINCIPAL) or len(principal) == len(PRINCIPAL):
        raise AclRefused(f"principal {principal!r}: logbus principals are User:<name>")
    return principal[len(PRINCIPAL):]


def matches(b: Binding, rtype: int, name: str | None, pattern: int, principal: str | None, host: str | None,
            operation: int, permission: int) -> bool:
    """Whether binding ``b`` matches a DescribeAcls / DeleteAcls filter (Kafka's rules)."""
    if rtype not in (ANY, b.resource_type) or operation not in (ANY, b.operation):
        return False
    if permission not in (ANY, ALLOW) or host not in (None, "*"):
        return False
    if principal is not None and principal != b.principal:
        return False
    if name is None:
        return pattern in (ANY, MATCH, b.pattern)
    if pattern == MATCH:
        return (b.pattern == LITERAL and b.name in (name, "*")) or (b.pattern == PREFIXED and name.startswith(b.name))
    return pattern in (ANY, b.pattern) and b.name == name


# -- the APIs ------------------------------------------------------------------------------------


def install(handlers: KafkaHandlers) -> None:
    acls = handlers.acls

    def admin(caller: Caller) -> bool:
        return handlers.access.cluster(caller.user, ALTER)

    def describe_acls(req: Request, caller: Caller) -> Any:
        body = req.body
        if not admin(caller):
            return DescribeAclsResponse(throttle_time_ms=0, error_code=K.CLUSTER_AUTHORIZATION_FAILED,
                                        error_message="describing ACLs needs the administrator tag", resources=[])
        found = [b for b in bindings(acls.permissions.values())
                 if matches(b, body.resource_type_filter, body.resource_name_filter, body.pattern_type_filter,
                            body.principal_filter, body.host_filter, body.operation, body.permission_type)]
        R = DescribeAclsResponse.DescribeAclsResource
        A = R.AclDescription
        grouped: dict[tuple[int, str, int], list[Any]] = {}
        for b in found:
            grouped.setdefault((b.resource_type, b.name, b.pattern), []).append(
                A(principal=b.principal, host="*", operation=b.operation, permission_type=ALLOW))
        resources = [R(resource_type=t, resource_name=n, pattern_type=p, acls=acls)
                     for (t, n, p), acls in grouped.items()]
        return DescribeAclsResponse(throttle_time_ms=0, error_code=K.NONE, error_message=None, resources=resources)

    def create_acls(req: Request, caller: Caller) -> Any:
        R = CreateAclsResponse.AclCreationResult
        allowed = admin(caller)
        results, describes = [], []
        for c in req.body.creations:
            if not allowed:
                results.append(R(error_code=K.CLUSTER_AUTHORIZATION_FAILED,
                                 error_message="creating ACLs needs the administrator tag"))
                continue
            try:
                user = check_binding(c.principal, c.host, c.permission_type)
                vhost, alt = target(c.resource_type, c.resource_name, c.resource_pattern_type)
                perms = perms_for(c.resource_type, c.operation)
                if not perms:
                    describes.append((len(results), user, vhost, alt))
                for perm in perms:
                    _grant(acls, user, vhost, perm, alt)
                results.append(R(error_code=K.NONE, error_message=None))
            except (AclRefused, LogbusError) as e:
                results.append(R(error_code=K.INVALID_REQUEST, error_message=str(e)))
        for index, user, vhost, alt in describes:  # DESCRIBE: implied by another grant, never alone
            p = acls.permissions.get((user, vhost))
            if p is None or not any(parsed == alt for perm in PERMS for _, parsed in alternatives(getattr(p, perm))):
                results[index] = R(error_code=K.INVALID_REQUEST, error_message=(
                    "logbus has no describe-only permission: grant READ, WRITE or ALTER on the same resource,"
                    " each of which implies DESCRIBE"))
        return CreateAclsResponse(throttle_time_ms=0, results=results)

    def delete_acls(req: Request, caller: Caller) -> Any:
        R = DeleteAclsResponse.DeleteAclsFilterResult
        M = R.DeleteAclsMatchingAcl
        allowed = admin(caller)
        results = []
        for f in req.body.filters:
            if not allowed:
                results.append(R(error_code=K.CLUSTER_AUTHORIZATION_FAILED,
                                 error_message="deleting ACLs needs the administrator tag", matching_acls=[]))
                continue
            found = [b for b in bindings(acls.permissions.values())
                     if matches(b, f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                                f.principal_filter, f.host_filter, f.operation, f.permission_type)]
            try:
                for b in found:
                    vhost, alt = target(b.resource_type, b.name, b.pattern)
                    for perm in perms_for(b.resource_type, b.operation):
                        _revoke(acls, b.user, vhost, perm, alt)
            except (AclRefused, LogbusError) as e:
                results.append(R(error_code=K.INVALID_REQUEST, error_message=str(e), matching_acls=[]))
                continue
            results.append(R(error_code=K.NONE, error_message=None, matching_acls=[
                M(error_code=K.NONE, error_message=None, resource_type=b.resource_type, resource_name=b.name,
                  pattern_type=b.pattern, principal=b.principal, host="*", operation=b.operation,
                  permission_type=ALLOW) for b in found]))
        return DeleteAclsResponse(throttle_time_ms=0, filter_results=results)

    handlers.register(DescribeAclsRequest, DescribeAclsResponse, 1, 3, describe_acls)
    handlers.register(CreateAclsRequest, CreateAclsResponse, 1, 3, create_acls)
    handlers.register(DeleteAclsRequest, DeleteAclsResponse, 1, 3, delete_acls)


def _grant(acls: Acls, user: str, vhost: str, perm: str, alt: Alt) -> None:
    p = acls.permissions.get((user, vhost))
    current = {k: getattr(p, k) if p is not None else "" for k in PERMS}
    current[perm] = with_alternative(current[perm], alt)
    acls.set_permission(user, vhost, **current)


def _revoke(acls: Acls, user: str, vhost: str, perm: str, alt: Alt) -> None:
    p = acls.permissions.get((user, vhost))
    if p is None:
        return
    current = {k: getattr(p, k) for k in PERMS}
    current[perm] = without_alternative(current[perm], alt)
    acls.set_permission(user, vhost, **current)
