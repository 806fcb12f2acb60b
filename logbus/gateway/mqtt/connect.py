"""What the server decides from a CONNECT before it looks up users or sessions: the client
identifier (assigned when empty), keep alive, session expiry and the client's limits,
or the CONNACK that refuses it. Pure: no socket, no broker, no clock.

MQTT 3.1.1 section 3.1.3.1 and MQTT 5.0 section 3.1.3.1: a server accepts identifiers of
1 to 23 UTF-8 characters from [0-9a-zA-Z] and may accept more; logbus accepts any
non-empty identifier up to ``MAX_CLIENT_ID`` characters (Mosquitto's limit is the
packet's). An empty identifier gets one assigned: in 3.1.1 only with clean session set
(else return code 2, identifier rejected), in 5.0 always, returned as the Assigned
Client Identifier property. MQTT 3.1 (level 3) keeps its 23-character limit.

Keep alive: 3.1.1 honours the client's value; 5.0 may lower it by Server Keep Alive
(``ServerLimits.max_keep_alive``), and a client asking for 0 (no keep alive) gets the
maximum then too. The connection is closed after 1.5 times the keep alive without a
packet (``keep_alive_deadline``).

Request Response Information (5.0): a client asking for it gets Response Information
``response/<client id>`` in CONNACK, a topic prefix of its own for responses.

Session expiry: 5.0 reads the Session Expiry Interval property (absent: 0, the session
ends with the connection); 3.1.1 has none, so clean session 0 means a session kept until
a clean connect (``NEVER_EXPIRES``), and clean session 1 means 0. Either is capped by
``ServerLimits.max_session_expiry`` (Mosquitto's ``persistent_client_expiration``, EMQX's
``session_expiry_interval``); a 5.0 client asking for more is told the capped value in
CONNACK (MQTT 5 section 3.2.2.3.2).

In flight to the client: at most ``ServerLimits.max_inflight`` QoS 1/2 messages
unacknowledged (Mosquitto's ``max_inflight_messages``); a 5.0 client's Receive Maximum
lowers it further. From the client: a 5.0 client is told our Receive Maximum
(``ServerLimits.receive_maximum``) and held to it (inbound.py); 3.1.1 has no way to tell
a client, so its publishes are not limited beyond the 65,535 packet ids.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .packets import ConnAck, Connect, Will
from .properties import Properties
from .reasons import CLIENT_IDENTIFIER_NOT_VALID, PROTOCOL_ERROR, REFUSED_IDENTIFIER_REJECTED
from .topics import has_wildcard
from .wire import MQTT_3_1, MQTT_5

MAX_CLIENT_ID = 65535  # characters: the most a UTF-8 string field can hold anyway
MQTT_3_1_MAX_CLIENT_ID = 23
# Response Information (MQTT 5 section 4.10): the topic prefix a client that asks may use
# for responses to its requests, its own: response/<client id>
RESPONSE_PREFIX = "response/"
NEVER_EXPIRES = 0xFFFFFFFF  # the session expiry interval that means "never" (MQTT 5)
DEFAULT_RECEIVE_MAXIMUM = 65535  # a client that gives none (MQTT 5 section 3.1.2.11.3)


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_keep_alive: int = 0  # seconds; 0: the client's value stands (5.0 may lower it)
    receive_maximum: int = DEFAULT_RECEIVE_MAXIMUM  # unacked QoS 1/2 publishes we accept
    topic_alias_maximum: int = 0  # aliases a client may set for its publishes
    maximum_packet_size: int = 0  # 0: no limit announced
    max_session_expiry: int = NEVER_EXPIRES  # seconds a session may outlive its connection
    max_inflight: int = DEFAULT_RECEIVE_MAXIMUM  # QoS 1/2 messages unacknowledged by a client


@dataclass(frozen=True, slots=True)
class Accepted:
    """A CONNECT the server may go on with (to authenticate, then open the session)."""

    client_id: str
    assigned: bool  # the server made the identifier up
    version: int
    clean_start: bool
    keep_alive: int  # seconds the server holds the client to (0: none)
    session_expiry: int  # seconds the session outlives the connection (NEVER_EXPIRES: kept)
    receive_maximum: int  # the client's: unacked QoS 1/2 publishes we may send it
    maximum_packet_size: int  # the client's (0: no limit)
    topic_alias_maximum: int  # the client's: aliases we may use towards it
    will: Will | None
    username: str | None
    password: bytes | None
    response_information: bool = False  # the client asked for Response Information (5.0)
    expiry_capped: bool = False  # the session expiry asked for was above the server's cap

    def connack(self, session_present: bool, limits: ServerLimits) -> ConnAck:
        """The CONNACK accepting it: in 5.0 with what the client must know of us."""
        if self.version < MQTT_5:
            return ConnAck(session_present)
        props = Properties(
            assigned_client_identifier=self.client_id if self.assigned else None,
            server_keep_alive=self.keep_alive if limits.max_keep_alive else None,
            receive_maximum=limits.receive_maximum if limits.receive_maximum != DEFAULT_RECEIVE_MAXIMUM else None,
            topic_alias_maximum=limits.topic_alias_maximum or None,
            maximum_packet_size=limits.maximum_packet_size or None,
            response_information=f"{RESPONSE_PREFIX}{self.client_id}" if self.response_information else None,
            session_expiry_interval=self.session_expiry if self.expiry_capped else None,
        )
        return ConnAck(session_present, 0, props)


@dataclass(frozen=True, slots=True)
class Refused:
    """A CONNECT refused: answer ``connack`` and close."""

    connack: ConnAck
    reason: str


def accept_connect(c: Connect, limits: ServerLimits, new_client_id: Callable[[], str]) -> Accepted | Refused:
    """Check a CONNECT's identifier and settle its parameters (module docstring)."""
    version = c.protocol_level
    client_id, assigned = c.client_id, False
    if not client_id:
        if version < MQTT_5 and not c.clean_start:
            return Refused(ConnAck(False, REFUSED_IDENTIFIER_REJECTED),
                           "an empty client identifier needs clean session 1")
        client_id, assigned = new_client_id(), True
    elif version == MQTT_3_1 and len(client_id) > MQTT_3_1_MAX_CLIENT_ID:
        return Refused(ConnAck(False, REFUSED_IDENTIFIER_REJECTED),
                       f"an MQTT 3.1 client identifier has at most {MQTT_3_1_MAX_CLIENT_ID} characters")
    elif len(client_id) > MAX_CLIENT_ID:
        code = CLIENT_IDENTIFIER_NOT_VALID if version == MQTT_5 else REFUSED_IDENTIFIER_REJECTED
        return Refused(ConnAck(False, code), f"a client identifier has at most {MAX_CLIENT_ID} characters")
    will = c.will
    if will is not None and will.properties.response_topic is not None and has_wildcard(will.properties.response_topic):
        return Refused(ConnAck(False, PROTOCOL_ERROR), "the will's response topic holds a wildcard")
    keep_alive = c.keep_alive
    if version == MQTT_5 and limits.max_keep_alive and (not keep_alive or keep_alive > limits.max_keep_alive):
        keep_alive = limits.max_keep_alive
    p = c.properties
    if version == MQTT_5:
        expiry = p.session_expiry_interval or 0
    else:
        expiry = 0 if c.clean_start else NEVER_EXPIRES
    capped = expiry > limits.max_session_expiry
    if capped:
        expiry = limits.max_session_expiry
    return Accepted(
        client_id=client_id, assigned=assigned, version=version, clean_start=c.clean_start,
        keep_alive=keep_alive, session_expiry=expiry,
        receive_maximum=min(p.receive_maximum or DEFAULT_RECEIVE_MAXIMUM, limits.max_inflight),
        maximum_packet_size=p.maximum_packet_size or 0,
        topic_alias_maximum=p.topic_alias_maximum or 0,
        will=c.will, username=c.username, password=c.password,
        response_information=version == MQTT_5 and p.request_response_information == 1,
        expiry_capped=capped,
    )


def keep_alive_deadline(keep_alive: int) -> float:
    """Seconds without a packet after which the connection is closed (and its will sent):
    one and a half times the keep alive (MQTT section 3.1.2.10); 0: never."""
    return keep_alive * 1.5
