"""The service's MQTT client: construction (credentials, TLS, will, reconnect backoff) and
plain-language reasons for failed connections — which never show the password (it only travels
in the MQTT CONNECT packet)."""

from __future__ import annotations

import socket
import ssl
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from .config.sections import BrokerConfig
from .redaction import redact

# CONNACK reason codes of a credentials problem: MQTT 5 "Bad user name or password" (134) and "Not
# authorized" (135); paho maps the MQTT 3.1.1 return codes 4 and 5 onto them.
AUTH_CODES = (134, 135)


def make_client(b: BrokerConfig, client_id: str, will: tuple[str, str] | None) -> mqtt.Client:
    """A paho client for ``b`` (not yet connected) with its retained will on ``will`` = (topic, text)
    (None: no will)."""
    proto = mqtt.MQTTv5 if b.protocol == 5 else mqtt.MQTTv311
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=proto)
    if b.username:
        c.username_pw_set(b.username, b.password or None)
    if b.tls:
        c.tls_set(ca_certs=b.tls_ca or None, certfile=b.tls_cert or None, keyfile=b.tls_key or None)
        c.tls_insecure_set(b.tls_insecure)
    c.reconnect_delay_set(int(max(1, b.reconnect_min)), int(max(1, b.reconnect_max)))
    c.max_queued_messages_set(10000)
    c.on_socket_open = _on_socket_open  # TCP_NODELAY from the CONNECT packet on, at every (re)connect
    if will is not None:
        c.will_set(will[0], will[1], qos=1, retain=True)
    return c


def _url(b: BrokerConfig) -> str:
    """The broker's URL for a message (a password in it masked; the configuration refuses one)."""
    return redact(b.url, b.url)


def refused(rc: Any, b: BrokerConfig) -> tuple[str, str]:
    """(counter, message) for a connection the broker refused in its CONNACK."""
    code = getattr(rc, "value", rc)
    if code in AUTH_CODES:
        who = f"user {b.username!r}" if b.username else "no username given"
        return "auth_failed", (f"authentication failed at {_url(b)}: the broker answered {str(rc)!r} ({who}; "
                               "check [broker] username and MBSD_TWIN_PASSWORD); retrying")
    return "connect_refused", f"the broker at {_url(b)} refused the connection: {rc}; retrying"


def failed(exc: BaseException | None, b: BrokerConfig) -> tuple[str, str]:
    """(counter, message) for a connection attempt that failed below MQTT (TCP or TLS)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        ca = f"[broker] tls_ca = {b.tls_ca!r}" if b.tls_ca else "the system CA store ([broker] tls_ca unset)"
        return "tls_failed", (f"TLS: the certificate of {_url(b)} did not verify against {ca}: "
                              f"{exc.verify_message or exc}; retrying")
    if isinstance(exc, ssl.SSLError):
        return "tls_failed", f"TLS handshake with {_url(b)} failed: {exc.reason or exc}; retrying"
    if isinstance(exc, ConnectionRefusedError):
        return "connect_failed", f"cannot connect to {_url(b)}: connection refused (is the broker running?); retrying"
    return "connect_failed", f"cannot connect to {_url(b)}: {exc or 'unknown error'}; retrying"


def _on_socket_open(client: mqtt.Client, userdata: Any, sock: Any) -> None:
    if isinstance(sock, socket.socket):  # also an ssl.SSLSocket
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def set_nodelay(client: mqtt.Client) -> None:
    """TCP_NODELAY on the client's socket (call on every connect): without it Nagle's algorithm
    holds a small message back until the previous one is acknowledged — 20-40 ms stalls."""
    sock = client.socket()
    if isinstance(sock, socket.socket):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
