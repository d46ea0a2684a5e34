"""deploy/: the Dockerfile, Kubernetes manifests, shipper configs and Alertmanager route parse,
and agree with the code (image version, port, user, environment variables, metric names, the
alert name and annotations, the ingest path and message fields). Where the real checkers are
installed (promtool, amtool, syslog-ng) they check the files too."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")

from oomdoctor import __version__  # noqa: E402
from oomdoctor.fleet.alerts import ALERTNAME  # noqa: E402
from oomdoctor.fleet.config import ENV as FLEET_ENV  # noqa: E402
from oomdoctor.fleet.config import FleetConfig  # noqa: E402
from oomdoctor.server.config import ServerConfig  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"


def manifests() -> dict[str, dict[str, Any]]:
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes/server.yaml").read_text()))
    return {d["kind"]: d for d in docs}


def container() -> dict[str, Any]:
    (c,) = manifests()["Deployment"]["spec"]["template"]["spec"]["containers"]
    return dict(c)


def dockerfile() -> str:
    return (DEPLOY / "Dockerfile").read_text()


def dockerfile_env() -> dict[str, str]:
    text = dockerfile().replace("\\\n", " ")
    (line,) = [ln for ln in text.splitlines() if ln.startswith("ENV ")]
    return dict(pair.split("=", 1) for pair in line[4:].split())


def known_env() -> set[str]:
    """Every OOMDOCTOR_* variable the code reads (its sources, as written)."""
    names: set[str] = set()
    for path in (ROOT / "oomdoctor").rglob("*.py"):
        text = path.read_text()
        names |= set(re.findall(r"OOMDOCTOR_[A-Z_]+", text))
        names |= {"OOMDOCTOR_" + n for n in re.findall(r'get\("([A-Z_]+)"\)', text)}
        names |= {"OOMDOCTOR_" + n for n in re.findall(r'\("[a-z_]+", "([A-Z_]+)"\)', text)}
    names |= {"OOMDOCTOR_" + n for n in FLEET_ENV.values()}
    return names


def test_image_port_and_user_agree_between_dockerfile_manifest_and_code() -> None:
    c = container()
    assert c["image"].rsplit(":", 1)[1] == __version__
    env = {e["name"]: e.get("value") for e in c["env"]}
    port = int(env["OOMDOCTOR_PORT"])
    assert port == ServerConfig().port == int(dockerfile_env()["OOMDOCTOR_PORT"])
    assert re.search(rf"^EXPOSE {port}$", dockerfile(), re.M)
    assert [p["containerPort"] for p in c["ports"]] == [port]
    (user,) = re.findall(r"^USER (\d+)$", dockerfile(), re.M)
    spec = manifests()["Deployment"]["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsUser"] == int(user) != 0
    froms = re.findall(r"^FROM (\S+)", dockerfile(), re.M)
    assert froms and all(f.endswith("-slim") for f in froms) and "[server]" in dockerfile()
    assert re.search(r'^ENTRYPOINT \["oomdoctor", "serve"\]$', dockerfile(), re.M)


def test_every_variable_set_is_one_the_code_reads_and_the_manifest_configures_a_valid_server() -> None:
    env = {e["name"]: e.get("value") for e in container()["env"]}
    known = known_env()
    assert set(env) - known == set()
    assert set(dockerfile_env()) - known - {"PYTHONUNBUFFERED"} == set()
    values = {k: v if v is not None else "secret-from-kubernetes" for k, v in env.items()}
    cfg = ServerConfig.from_env(values)
    cfg.check_exposure()  # 0.0.0.0 with a token: accepted
    assert (cfg.host, cfg.fleet.alertmanager_url, cfg.fleet.state_file) == (
        "0.0.0.0", "http://alertmanager-operated.monitoring:9093", "/var/lib/oomdoctor/fleet-state.json")
    mount = {m["name"]: m["mountPath"] for m in container()["volumeMounts"]}
    assert os.path.dirname(cfg.fleet.state_file or "") == mount["state"]


def test_service_and_servicemonitor_reach_the_metrics_port() -> None:
    m = manifests()
    (svc_port,) = m["Service"]["spec"]["ports"]
    (container_port,) = container()["ports"]
    assert svc_port["targetPort"] == container_port["name"]
    (endpoint,) = m["ServiceMonitor"]["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"]) == (svc_port["name"], "/metrics")
    labels = m["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert m["Service"]["spec"]["selector"] == labels
    assert m["ServiceMonitor"]["spec"]["selector"]["matchLabels"] == m["Service"]["metadata"]["labels"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container()[probe]["httpGet"] == {"path": "/healthz", "port": "http"}


def exposed_metric_names() -> set[str]:
    pytest.importorskip("prometheus_client")
    from oomdoctor.fleet import Fleet
    from oomdoctor.fleet.records import StreamId

    fleet = Fleet(FleetConfig(alertmanager_url="http://am", slack_webhook_url="http://s", webhook_url="http://w"))
    fleet.table.ingest([(StreamId.of({"node": "n"}), (ROOT / "fixtures/vllm/vllm-054.log").read_bytes())])
    fleet.table.flush_all()
    assert fleet.metrics is not None
    text = fleet.metrics.exposition().decode()
    return set(re.findall(r"^(oomdoctor_\w+?)(?:\{| )", text, re.M))


def test_prometheus_rules_use_metrics_the_server_exposes() -> None:
    exposed = exposed_metric_names()
    rules = [r for g in manifests()["PrometheusRule"]["spec"]["groups"] for r in g["rules"]]
    used = {name for r in rules for name in re.findall(r"oomdoctor_\w+", r["expr"])}
    assert used and used <= exposed, used - exposed


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool not installed")
def test_promtool_accepts_the_rules(tmp_path: Path) -> None:
    spec = manifests()["PrometheusRule"]["spec"]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(spec))
    out = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_alertmanager_route_matches_the_alerts_oomdoctor_sends() -> None:
    doc = yaml.safe_load((DEPLOY / "alertmanager.yaml").read_text())
    (route,) = doc["route"]["routes"]
    assert route["matchers"] == [f'alertname="{ALERTNAME}"']
    (slack,) = next(r for r in doc["receivers"] if r["name"] == route["receiver"])["slack_configs"]
    annotations = set(re.findall(r"\.Annotations\.(\w+)", slack["text"]))
    labels = set(re.findall(r"\.(?:Common)?Labels\.(\w+)", slack["title"] + slack["text"]))
    assert annotations == {"summary", "remedy", "command", "report"}
    assert labels == {"kind", "node", "pod", "container", "cause"}
    assert set(route["group_by"]) <= {"alertname", "node", "kind"}


@pytest.mark.skipif(not shutil.which("amtool"), reason="amtool not installed")
def test_amtool_accepts_the_route(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("https://hooks.slack.com/services/T/B/X")
    text = (DEPLOY / "alertmanager.yaml").read_text().replace(
        "/etc/alertmanager/secrets/slack-webhook-url", str(tmp_path / "secret"))
    path = tmp_path / "am.yml"
    path.write_text(text)
    out = subprocess.run(["amtool", "check-config", str(path)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_shippers_post_to_ingest_with_fields_oomdoctor_reads() -> None:
    defaults = FleetConfig()
    vector = yaml.safe_load((DEPLOY / "shippers/vector.yaml").read_text())
    sink = vector["sinks"]["oomdoctor"]
    assert sink["uri"].endswith(":8080/v1/ingest") and sink["encoding"]["codec"] == "json"
    assert sink["framing"]["method"] == "newline_delimited" and sink["auth"]["strategy"] == "bearer"
    assert "message" in defaults.message_fields and "host" in defaults.host_fields
    assert {"kubernetes.pod_name", "kubernetes.container_name"} <= set(defaults.pod_fields + defaults.container_fields)

    fluent = (DEPLOY / "shippers/fluent-bit.conf").read_text()
    out = fluent[fluent.index("[OUTPUT]"):]
    settings = dict(re.findall(r"^\s+(\S+)\s+(.+)$", out, re.M))
    assert (settings["URI"], settings["Format"], settings["Port"]) == ("/v1/ingest", "json_lines", "8080")
    assert "log" in defaults.message_fields and "kubernetes.host" in defaults.host_fields

    syslog = (DEPLOY / "shippers/syslog-ng.conf").read_text()
    assert ':8080/v1/ingest"' in syslog and "MESSAGE=$MESSAGE" in syslog
    assert {"MESSAGE"} <= set(defaults.message_fields) and {"HOST"} <= set(defaults.host_fields)
    assert {"FILE_NAME"} <= set(defaults.file_fields)


@pytest.mark.skipif(not shutil.which("syslog-ng"), reason="syslog-ng not installed")
def test_syslog_ng_accepts_its_config() -> None:
    out = subprocess.run(
        ["syslog-ng", "--syntax-only", f"--cfgfile={DEPLOY / 'shippers/syslog-ng.conf'}"],
        capture_output=True, text=True, check=False, env={**os.environ, "OOMDOCTOR_API_TOKEN": "t"},
    )
    assert out.returncode == 0, out.stderr


def test_node_daemonset_follows_container_logs_with_a_valid_configuration() -> None:
    (ds,) = list(yaml.safe_load_all((DEPLOY / "kubernetes/node-daemonset.yaml").read_text()))
    assert ds["kind"] == "DaemonSet"
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    assert c["image"] == container()["image"]
    assert c["command"][:3] == ["oomdoctor", "--follow", "/var/log/containers/*.log"]
    from oomdoctor.cli.follow import is_glob

    assert is_glob(c["command"][2])
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert set(env) - known_env() == {"NODE_NAME"}  # (read by node mode: the stream's node label)
    assert "NODE_NAME" in (ROOT / "oomdoctor/cli/follow.py").read_text()
    cfg = FleetConfig.from_env({k: v for k, v in env.items() if v is not None})
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert os.path.dirname(cfg.state_file or "") == mounts["state"]
    assert "/var/log/containers/".startswith(mounts["varlog"])
