"""Publish a CSV of rig samples to the mbsd-twin service in its sensor-message format (docs/connect-your-rig.md).

CSV: a header row ``t,<channel>,...`` (t in s, equally spaced; channel names as in the twin's [core]
inputs and compare, values in SI units: rad, rad/s, N, N.m, m), then one row per sample; lines starting
with # are skipped. Sent in real time, ``--batch`` samples per message, seq +1 per message, with the
rig's online/offline status. Example:
    .venv/bin/python examples/rig_publisher.py samples.csv --broker mqtt://127.0.0.1:1883 --asset pd-01
"""
import argparse
import csv
import json
import socket
import time
import uuid
from urllib.parse import urlparse

import paho.mqtt.client as mqtt

ap = argparse.ArgumentParser(description="publish a CSV of rig samples to the mbsd-twin service")
ap.add_argument("csv")
ap.add_argument("--broker", default="mqtt://127.0.0.1:1883")
ap.add_argument("--asset", default="sc-01")
ap.add_argument("--prefix", default="dt/v1")
ap.add_argument("--batch", type=int, default=20, help="samples per message")
args = ap.parse_args()
with open(args.csv, newline="", encoding="utf-8") as fh:
    lines = [row for row in csv.reader(fh) if row and not row[0].startswith("#")]
names, rows = lines[0], [[float(x) for x in row] for row in lines[1:]]
dt = rows[1][0] - rows[0][0]
topic, session = f"{args.prefix}/{args.asset}/meas", uuid.uuid4().hex[:8]
status = {s: json.dumps({"state": s, "session": session}) for s in ("online", "offline")}
url = urlparse(args.broker)
client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"rig-{args.asset}-{session}")
client.will_set(f"{topic}/status", status["offline"], qos=1, retain=True)  # the broker says so if we die
# send each message at once (else Nagle's algorithm holds small messages back by 20-40 ms now and then)
client.on_socket_open = lambda c, userdata, sock: sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
client.connect(url.hostname or "127.0.0.1", url.port or 1883)
client.loop_start()
client.publish(f"{topic}/status", status["online"], qos=1, retain=True)
start = time.monotonic()
for seq, k in enumerate(range(0, len(rows) - args.batch + 1, args.batch)):
    block = rows[k:k + args.batch]
    msg = {"v": 1, "asset": args.asset, "seq": seq, "t0": block[0][0], "dt": dt, "n": len(block),
           "ch": {name: [row[j] for row in block] for j, name in enumerate(names) if j > 0}}
    time.sleep(max(0.0, start + (k + args.batch) * dt - time.monotonic()))  # real time: sent when sampled
    client.publish(f"{topic}/sensors", json.dumps(msg), qos=0)
client.publish(f"{topic}/status", status["offline"], qos=1, retain=True).wait_for_publish(5)
client.disconnect()
client.loop_stop()
