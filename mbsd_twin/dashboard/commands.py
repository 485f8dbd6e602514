"""The dashboard's reset and set-parameter controls: a relay onto the twin's own command path.

The page POSTs ``{"username", "password", "args", "id"}`` (JSON) to ``/dashboard/api/cmd/<name>``.
The relay connects to the twin's broker **as that user** — the dashboard holds no credentials of
its own — publishes the command on ``{p}/{a}/twin/cmd/<name>`` (QoS 1, not retained) and returns
the twin's reply (MQTT 5: on the response topic ``{p}/{a}/twin/reply/dashboard-<id>``; 3.1.1: the
reply on ``{p}/{a}/twin/reply`` with the same ``id``). The broker's ACL decides whether that user
may command the twin (services/mosquitto.acl: ``operator``); the twin then admits it like any other
command (``[commands] enabled``, rate, size; docs/mqtt-contract.md, "Commands"). Nothing here calls
the twin's core.

Only ``reset`` and ``set_param`` are offered, and only those in ``[commands] enabled``: otherwise the
page shows no control and the route answers 404. A request must be JSON (``Content-Type:
application/json``, which a cross-site form cannot send without the browser asking first) and, when
the browser names its ``Origin``, come from the page's own host.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import uuid
from typing import Any
from urllib.parse import urlsplit

from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from ..twin.config.sections import BrokerConfig
from ..twin.link import failed, make_client, refused
from ..twin.protocol import Topics

CONTROLS = ("reset", "set_param")
Reply = tuple[int, str, bytes, dict[str, str]]


def _answer(code: int, obj: dict[str, Any]) -> Reply:
    return code, "application/json", json.dumps(obj).encode(), {"Cache-Control": "no-store"}


class CommandRelay:
    """POST ``/dashboard/api/cmd/<name>``: the command sent over MQTT as the requesting user."""

    def __init__(self, broker: BrokerConfig, topics: Topics, enabled: tuple[str, ...], source: str = "",
                 timeout: float = 5.0) -> None:
        self.broker, self.topics, self.timeout = broker, topics, timeout
        self.offered = [c for c in CONTROLS if c in enabled]
        self.where = f"[commands] enabled of {source or 'the service configuration'}"

    def __call__(self, path: str, headers: dict[str, str], body: bytes) -> Reply:
        name = urlsplit(path).path.rsplit("/", 1)[-1]
        if name not in self.offered:
            return _answer(404, {"cmd": name, "ok": False, "detail": f"the dashboard offers no command {name!r} "
                                 f"(offered: {', '.join(self.offered) or 'none'}; see {self.where})"})
        problem = self._request_problem(headers)
        try:
            req = json.loads(body) if problem is None else {}
        except ValueError:
            problem = "the request body is not JSON"
        if problem is None and not (isinstance(req, dict) and isinstance(req.get("args", {}), dict)):
            problem = 'expected a JSON object {"username", "password", "args": {...}}'
        if problem:
            return _answer(400, {"cmd": name, "ok": False, "detail": problem})
        return self.send(name, req.get("args", {}), str(req.get("username", "")), str(req.get("password", "")))

    @staticmethod
    def _request_problem(headers: dict[str, str]) -> str | None:
        if not headers.get("content-type", "").startswith("application/json"):
            return "a command request must be Content-Type: application/json"
        origin = headers.get("origin")
        if origin and urlsplit(origin).netloc != headers.get("host"):
            return f"a command request from another site ({origin}) is refused"
        return None

    def send(self, name: str, args: dict[str, Any], username: str, password: str) -> Reply:
        """Publish the command as ``username`` and wait for the twin's reply (at most ``timeout`` s)."""
        cid = f"dashboard-{uuid.uuid4().hex[:10]}"
        b = dataclasses.replace(self.broker, username=username, password=password)
        c = make_client(b, cid, None)
        v5 = b.protocol == 5
        reply_topic = self.topics.twin(f"reply/{cid}" if v5 else "reply")
        got: dict[str, Any] = {}
        done, subscribed = threading.Event(), threading.Event()

        def on_connect(client: Any, userdata: Any, flags: Any, rc: Any, props: Any = None) -> None:
            if rc.is_failure:
                got["error"] = refused(rc, b)[1].removesuffix("; retrying")
                done.set()
                subscribed.set()
            else:
                client.subscribe(reply_topic, qos=1)

        def on_message(client: Any, userdata: Any, msg: Any) -> None:
            try:
                body = json.loads(msg.payload)
            except ValueError:
                return
            if isinstance(body, dict) and body.get("id") == cid:
                got["reply"] = body
                done.set()

        c.on_connect, c.on_message = on_connect, on_message
        c.on_subscribe = lambda *a: subscribed.set()
        try:
            c.connect(b.host, b.port, keepalive=10)
        except OSError as exc:
            return _answer(502, {"cmd": name, "ok": False, "detail": failed(exc, b)[1].removesuffix("; retrying")})
        c.loop_start()
        try:
            if subscribed.wait(self.timeout) and "error" not in got:
                props = Properties(PacketTypes.PUBLISH)
                if v5:
                    props.ResponseTopic, props.CorrelationData = reply_topic, cid.encode()
                c.publish(self.topics.twin(f"cmd/{name}"), json.dumps({**args, "id": cid}), qos=1, retain=False,
                          properties=props if v5 else None)
            done.wait(self.timeout)
        finally:
            c.disconnect()
            c.loop_stop()
        if "reply" in got:
            return _answer(200, got["reply"])
        who = f"user {username!r}" if username else "no username"
        detail = got.get("error") or (f"no reply from the twin within {self.timeout:g} s: the broker's ACL may not let "
                                      f"{who} send commands, or the twin is not running")
        return _answer(502, {"cmd": name, "ok": False, "detail": detail})
