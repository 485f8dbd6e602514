"""The Dockerfile without a Docker engine: its install step is the README's, and the command it runs
works in a fresh venv built the way the image is (same files, same install command, same environment),
answering its HEALTHCHECK and stopping on SIGTERM. Also services/docker-compose.yml's settings."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from mbsd_twin.demo.procs import free_port
from mbsd_twin.twin.config.file import ENV

ROOT = Path(__file__).resolve().parents[1]


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _readme_install() -> str:
    quick = (ROOT / "README.md").read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    cmds = re.findall(r"`([^`]*pip install[^`]*)`", quick)
    assert len(cmds) == 1, cmds
    return cmds[0]


def _env() -> dict[str, str]:
    env: dict[str, str] = {}
    for word, rest in _instructions():
        if word == "ENV":
            env.update(dict(kv.split("=", 1) for kv in shlex.split(rest)))
    return env


def test_dockerfile_matches_readme_and_rules() -> None:
    ins = _instructions()
    words = [w for w, _ in ins]
    assert ins[0] == ("FROM", "python:3.11-slim")
    runs = [r for w, r in ins if w == "RUN" and "pip install" in r]
    assert runs == [_readme_install()] == ["python -m pip install '.[twin,fmu]'"]
    user = [r for w, r in ins if w == "USER"]
    installs = [i for i, (w, r) in enumerate(ins) if w == "RUN" and ("pip" in r or "useradd" in r)]
    assert user == ["twin"] and words.index("USER") > max(installs)  # only the warm-up runs as the user
    health = next(r for w, r in ins if w == "HEALTHCHECK")
    assert "/healthz" in health and "MBSD_TWIN_METRICS_PORT" in health
    assert ("CMD", '["mbsd-twin", "twin", "serve"]') in ins and ("STOPSIGNAL", "SIGTERM") in ins
    env = _env()
    assert {k for k in env if k.startswith("MBSD_TWIN_")} <= set(ENV)
    copied = {r.split()[0] for w, r in ins if w == "COPY"}
    assert copied == {"pyproject.toml", "mbsd_twin", "examples"}


def test_compose_uses_known_settings() -> None:
    doc = yaml.safe_load((ROOT / "services" / "docker-compose.yml").read_text())
    twin = doc["services"]["twin"]
    assert twin["build"]["dockerfile"] == "Dockerfile" and (ROOT / "services" / twin["build"]["context"]
                                                            / "Dockerfile").exists()
    assert set(twin["environment"]) - {"MBSD_TWIN_CONFIG", "PGPASSWORD"} <= set(ENV)  # PGPASSWORD: libpq's
    assert twin["ports"] == [f"${{MBSD_BIND_ADDRESS:-127.0.0.1}}:{twin['environment']['MBSD_TWIN_METRICS_PORT']}:9108"]
    for vol in twin["volumes"] + doc["services"]["mosquitto"]["volumes"]:
        assert (ROOT / "services" / vol.split(":")[0]).exists(), vol


PASSWORDS = ("POSTGRES_PASSWORD", "GRAFANA_DB_PASSWORD", "GRAFANA_ADMIN_PASSWORD")


def _interpolate(value: Any, env: dict[str, str], missing: list[str]) -> Any:
    """``value`` with compose's variable syntax resolved as ``docker compose`` does: ``${VAR}``,
    ``${VAR:-default}`` / ``${VAR-default}``, ``${VAR:?message}`` / ``${VAR?message}`` (a missing
    variable is an error: its message is appended to ``missing``), ``$$`` a literal ``$``."""
    if isinstance(value, dict):
        return {k: _interpolate(v, env, missing) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, env, missing) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name, op, arg = m.group("name"), m.group("op") or "", m.group("arg") or ""
        unset = name not in env or (op.startswith(":") and env[name] == "")
        if op.endswith("?") and unset:
            missing.append(f"{name}: {arg}")
            return ""
        return arg if op.endswith("-") and unset else env.get(name, "")

    return re.sub(r"\$\$|\$\{(?P<name>\w+)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}", one, value)


def _compose(env: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    missing: list[str] = []
    doc = _interpolate(yaml.safe_load((ROOT / "services" / "docker-compose.yml").read_text()), env, missing)
    return doc, missing


def test_compose_refuses_to_start_without_passwords() -> None:
    """Every password the stack uses is required (``${VAR:?message}``): compose stops before any
    container starts when one is unset or empty, with a message naming it; no default password."""
    text = (ROOT / "services" / "docker-compose.yml").read_text()
    for name in PASSWORDS:
        assert re.search(r"\$\{" + name + ":-", text) is None, name  # no fallback such as admin / twin-local
    _, missing = _compose({})
    assert sorted({m.split(":")[0] for m in missing}) == sorted(PASSWORDS)
    assert all(f"set {m.split(':')[0]}" in m for m in missing), missing
    for name in PASSWORDS:  # one of them empty or unset: refused, naming it
        env = {n: "s3cret" for n in PASSWORDS} | {name: ""}
        assert [m.split(":")[0] for m in _compose(env)[1]] == [name] * text.count("${" + name + ":?")
    doc, missing = _compose({n: f"pw-{n}" for n in PASSWORDS})
    assert missing == []
    assert doc["services"]["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == "pw-GRAFANA_ADMIN_PASSWORD"
    assert doc["services"]["twin"]["environment"]["PGPASSWORD"] == "pw-POSTGRES_PASSWORD"


def _published(doc: dict[str, Any]) -> dict[str, list[str]]:
    return {name: [str(p) for p in svc.get("ports", [])] for name, svc in doc["services"].items()}


def test_compose_publishes_on_loopback_unless_told_otherwise() -> None:
    """Every published port is bound to 127.0.0.1 (the broker of the stack is anonymous, Grafana and
    the dashboard have logins of their own); ``MBSD_BIND_ADDRESS`` publishes them elsewhere."""
    env = {n: "x" for n in PASSWORDS}
    ports = _published(_compose(env)[0])
    assert {n for n, p in ports.items() if p} == {"mosquitto", "twin", "postgres", "grafana"}
    for name, entries in ports.items():
        for entry in entries:
            host, published, target = entry.split(":")
            assert host == "127.0.0.1" and published.isdigit() and target.isdigit(), (name, entry)
    wide = _published(_compose(env | {"MBSD_BIND_ADDRESS": "0.0.0.0"})[0])
    assert all(e.startswith("0.0.0.0:") for es in wide.values() for e in es) and wide.keys() == ports.keys()


def _healthcheck(venv_bin: Path, env: dict[str, str]) -> int:
    cmd = next(r for w, r in _instructions() if w == "HEALTHCHECK").split(" CMD ", 1)[1]
    return subprocess.run(cmd, shell=True, env=env, timeout=30).returncode


@pytest.mark.slow  # a fresh venv's pip install and kernel compile: about 4 min (make test-slow)
def test_image_command_in_a_fresh_venv(broker: Any, tmp_path: Path) -> None:
    app = tmp_path / "app"  # the image's /app: what the Dockerfile copies
    app.mkdir()
    for w, r in _instructions():
        if w == "COPY":
            *srcs, _ = r.split()
            for src in srcs:
                s = ROOT / src
                if s.is_dir():
                    shutil.copytree(s, app / src, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy(s, app / src)
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=120)
    vbin = tmp_path / "venv" / "bin"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MBSD_TWIN_", "PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = f"{vbin}{os.pathsep}{env.get('PATH', '')}"
    install = subprocess.run(_readme_install(), shell=True, cwd=app, env=env, capture_output=True, text=True,
                             timeout=600)
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]
    port = free_port()
    env.update(_env())
    env.pop("PIP_NO_CACHE_DIR", None)
    env.update({"MBSD_TWIN_BROKER": broker.url, "MBSD_TWIN_METRICS_HOST": "127.0.0.1",
                "MBSD_TWIN_METRICS_PORT": str(port), "NUMBA_CACHE_DIR": str(tmp_path / "numba")})
    after_user = [r for w, r in _instructions()[[w for w, _ in _instructions()].index("USER"):] if w == "RUN"]
    for run in after_user:  # the build-time warm-up fills the numba cache
        done = subprocess.run(run, shell=True, cwd=app, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-2000:]
    assert any((tmp_path / "numba").rglob("*.nbi")), "the warm-up cached no compiled kernel"
    cmd = ["mbsd-twin", "twin", "serve"]
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, cwd=app, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        t_end = time.monotonic() + 90
        while _healthcheck(vbin, env) != 0:
            assert proc.poll() is None and time.monotonic() < t_end, (tmp_path / "serve.log").read_text()
            time.sleep(0.5)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/dashboard/", timeout=5) as r:
            assert b'id="chart-angle"' in r.read()  # the static files are in the installed package
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
            assert r.status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    text = (tmp_path / "serve.log").read_text()
    assert f"on {broker.url}" in text
    where = subprocess.run([str(vbin / "python"), "-c", "import mbsd_twin; print(mbsd_twin.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path).stdout
    assert "site-packages" in where  # an installed package, not the source tree


RAY_PORT_OPTIONS = ("--port", "--ray-client-server-port", "--dashboard-port", "--dashboard-host", "--node-manager-port",
                    "--object-manager-port", "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port",
                    "--runtime-env-agent-port", "--metrics-export-port", "--min-worker-port", "--max-worker-port",
                    "--node-ip-address")


def test_docs_say_which_ray_ports_to_firewall() -> None:
    """docs/fleet.md and docs/campaigns.md name every port a Ray node listens on, with the option of
    the installed Ray that fixes it, so a firewall rule can name them."""
    fleet = (ROOT / "docs" / "fleet.md").read_text().split("### Ray's ports: firewall them", 1)[1].split("\n## ")[0]
    campaigns = (ROOT / "docs" / "campaigns.md").read_text().split("## Ray's ports: firewall them", 1)[1]
    ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    assert ray, "ray is not installed"
    helptext = subprocess.run([ray, "start", "--help"], capture_output=True, text=True, timeout=120).stdout
    for opt in RAY_PORT_OPTIONS:
        assert re.search(rf"^\s+{re.escape(opt)}\b", helptext, re.M), f"ray start has no {opt}"
        assert f"`{opt}" in fleet or f" {opt} " in fleet, f"docs/fleet.md does not name {opt}"
    for port in ("6379", "10001", "8265", "10002–19999"):
        assert port in fleet, port
    for opt in RAY_PORT_OPTIONS[:-1]:
        assert opt in campaigns, f"docs/campaigns.md does not name {opt}"
    assert "--node-ip-address 127.0.0.1" in campaigns and "6379" in campaigns and "10001" in campaigns
