"""Fleet mode's core (oomdoctor.fleet): records, streams fed batch by batch, bounds, eviction,
resolution, persistence and sinks. No web framework, no clock: time is passed in."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from oomdoctor.fleet.alerts import FleetFinding
from oomdoctor.fleet.config import FleetConfig
from oomdoctor.fleet.records import RecordError, StreamId, group_runs, parse_records
from oomdoctor.fleet.sinks import AlertmanagerSink, Dispatcher, SlackSink, WebhookSink
from oomdoctor.fleet.streams import Busy, StreamTable

ROOT = Path(__file__).resolve().parent.parent
#: fixtures of several engines (each a UTF-8 log whose failure spans several lines)
FIXTURES = [
    "vllm/vllm-054.log", "llamacpp/other-003.log", "sglang/new-023.log", "vllm/synthetic-v1-worker-failed-profiling.log",
    "pytorch/synthetic-memory-summary.log", "ollama/other-004.log", "jax/other-038.log",
]


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def records(text: bytes, **fields: str) -> list[bytes]:
    """One Fluent Bit ``json_lines`` record per line of ``text``."""
    return [json.dumps({"log": line, **fields}).encode() for line in text.decode("utf-8").split("\n")[:-1]]


def feed(table: StreamTable, recs: list[bytes], per_batch: int) -> None:
    for i in range(0, len(recs), per_batch):
        table.ingest(group_runs(parse_records(b"\n".join(recs[i:i + per_batch]), table.cfg)))


def essentials(f: dict[str, Any]) -> tuple[Any, ...]:
    """What a finding says: rule, kind, severity, phase, lines, figures, cause, the remedies."""
    rem = [(r["id"], r.get("flags", {}), r.get("env", {}), r.get("settings", {})) for r in f["remedies"][:3]]
    cause = f["cause"]["id"] if isinstance(f["cause"], dict) else f["cause"]
    return (f["rule"], f["kind"], f["severity"], f["phase"], f["line"], f["end_line"],
            json.dumps(f["figures"], sort_keys=True), cause, json.dumps(rem, sort_keys=True))


def cli_findings(path: Path) -> list[tuple[Any, ...]]:
    """The findings of ``oomdoctor FILE --format json`` (the CLI itself, in a subprocess)."""
    out = subprocess.run([sys.executable, "-m", "oomdoctor", str(path), "--format", "json"],
                         capture_output=True, text=True, cwd=ROOT, check=False)
    assert out.returncode in (0, 1), out.stderr
    report = json.loads(out.stdout)
    return [essentials({**f, "line": f["location"]["line"], "end_line": f["location"]["end_line"]})
            for f in report["findings"]]


# -- records ----------------------------------------------------------------------------------------


def test_records_of_each_shipper_give_message_and_stream_key() -> None:
    cfg = FleetConfig()
    body = b"\n".join([
        json.dumps({"log": "a", "kubernetes": {"host": "gpu-1", "pod_name": "vllm-0", "container_name": "engine"}}).encode(),
        json.dumps({"message": "b\n", "host": "gpu-2", "file": "/var/log/x.log"}).encode(),
        json.dumps({"MESSAGE": "c", "HOST": "gpu-3", "FILE_NAME": "/l/y.log"}).encode(),
        json.dumps({"other": "no message: skipped"}).encode(),
    ])
    got = [(s.key, dict(s.labels), line) for s, line in parse_records(body, cfg)]
    assert got == [
        ("gpu-1/vllm-0/engine/-", {"node": "gpu-1", "pod": "vllm-0", "container": "engine"}, b"a\n"),
        ("gpu-2/-/-//var/log/x.log", {"node": "gpu-2", "file": "/var/log/x.log"}, b"b\n"),
        ("gpu-3/-/-//l/y.log", {"node": "gpu-3", "file": "/l/y.log"}, b"c\n"),
    ]
    # Vector without framing: one JSON array
    arr = json.dumps([{"message": "x", "host": "h"}, {"message": "y", "host": "h"}]).encode()
    assert group_runs(parse_records(arr, cfg)) == [(StreamId.of({"node": "h"}), b"x\ny\n")]


def test_configured_fields_are_used() -> None:
    cfg = FleetConfig(message_fields=("msg",), host_fields=("n",))
    (sid, line), = parse_records(b'{"msg": "m", "n": "node-7", "log": "ignored"}', cfg)
    assert (sid.key, line) == ("node-7/-/-/-", b"m\n")


@pytest.mark.parametrize("body, where", [
    (b'{"log": "a"}\n{"log": ', "record 2: malformed JSON"),
    (b'"just a string"', "record 1: not a JSON object"),
    (b"[1, 2]", "record 1: not a JSON object"),
])
def test_malformed_batches_say_where(body: bytes, where: str) -> None:
    with pytest.raises(RecordError, match=where):
        parse_records(body, FleetConfig())


# -- streams: the same findings as the CLI, whatever the batches --------------------------------------


@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("per_batch", [1, 3])
def test_stream_findings_equal_the_clis(name: str, per_batch: int) -> None:
    path = ROOT / "fixtures" / name
    table = StreamTable(FleetConfig())
    recs = records(path.read_bytes(), host="n1", file=name)
    feed(table, recs, per_batch)
    table.flush_all()
    (key,) = [s["key"] for s in table.streams()]
    got = [essentials(ff["finding"]) for ff in table.findings(key) or []]
    expected = cli_findings(path)
    assert expected, "each fixture has a finding"
    assert got == expected


def test_a_failure_split_over_two_batches_is_found_once_interleaved_with_another_stream() -> None:
    data = (ROOT / "fixtures/vllm/vllm-054.log").read_bytes()
    a = records(data, host="a")
    b = records(data, host="b")
    table = StreamTable(FleetConfig())
    half = len(a) // 2
    # the two streams' lines interleaved in each batch, the failure of each cut in two
    for part in (slice(0, half), slice(half, None)):
        mixed = [r for pair in zip(a[part], b[part], strict=True) for r in pair]
        table.ingest(group_runs(parse_records(b"\n".join(mixed), table.cfg)))
    table.flush_all()
    for key in ("a/-/-/-", "b/-/-/-"):
        found = table.findings(key) or []
        assert [f["labels"]["kind"] for f in found] == ["vllm.kv-cache.max-len-exceeds"]
        assert found[0]["annotations"]["command"] == "--max-model-len 81392"


OOM = (ROOT / "fixtures/vllm/vllm-054.log").read_bytes()
UP = b"(APIServer pid=1) INFO:     Application startup complete.\n"


def table_with_events(cfg: FleetConfig | None = None, clock: Clock | None = None) -> tuple[StreamTable, list[tuple[str, str]]]:
    table = StreamTable(cfg or FleetConfig(), clock=clock or Clock(), wall=lambda: 1_700_000_000.0)
    events: list[tuple[str, str]] = []
    table.subscribe(lambda ev, ff: events.append((ev, ff.labels["kind"])))
    return table, events


def sid(node: str = "gpu-1") -> StreamId:
    return StreamId.of({"node": node, "pod": "vllm-0", "container": "engine"})


def test_alert_labels_and_annotations() -> None:
    table, events = table_with_events(FleetConfig(public_url="https://oomdoctor.example"))
    table.ingest([(sid(), OOM)])
    table.flush_all()
    (ff,) = table.active()
    assert ff.labels == {
        "alertname": "OOMDoctorFinding", "severity": "error", "kind": "vllm.kv-cache.max-len-exceeds",
        "cause": "kv-cache-too-small", "product": "vllm-serve", "engine": "vllm", "node": "gpu-1",
        "pod": "vllm-0", "container": "engine", "stream": "gpu-1/vllm-0/engine/-",
    }
    assert ff.annotations["remedy"] == "Limit the context to 81392 tokens"
    assert ff.annotations["command"] == "--max-model-len 81392"
    assert ff.annotations["report"] == "https://oomdoctor.example/v1/streams/gpu-1%2Fvllm-0%2Fengine%2F-/findings"
    alert = ff.alertmanager(1_700_000_000.0, 60.0)
    assert (alert["startsAt"], alert["endsAt"]) == ("2023-11-14T22:13:20.000Z", "2023-11-14T22:17:20.000Z")
    assert events == [("firing", "vllm.kv-cache.max-len-exceeds")]


def test_resolved_when_the_stream_shows_the_process_up_again() -> None:
    table, events = table_with_events()
    table.ingest([(sid(), OOM)])
    table.flush_all()
    table.ingest([(sid(), b"INFO: Started server process [7]\n")])
    assert table.active() and len(events) == 1  # a start alone is not "up"
    table.ingest([(sid(), UP)])
    assert not table.active()
    assert events == [("firing", "vllm.kv-cache.max-len-exceeds"), ("resolved", "vllm.kv-cache.max-len-exceeds")]
    # an up line before the failure resolves nothing
    table2, events2 = table_with_events()
    table2.ingest([(sid(), UP + OOM)])
    table2.flush_all()
    assert len(table2.active()) == 1 and events2 == [("firing", "vllm.kv-cache.max-len-exceeds")]


def test_the_same_failure_told_again_while_active_is_one_finding() -> None:
    table, events = table_with_events()
    for _ in range(2):  # a shipper re-sending a batch it got no answer for
        table.ingest([(sid(), OOM)])
        table.flush_all()
    assert len(table.findings("gpu-1/vllm-0/engine/-") or []) == 1
    assert events == [("firing", "vllm.kv-cache.max-len-exceeds")]
    # once resolved, the same failure again is a new finding
    table.ingest([(sid(), UP + OOM)])
    table.flush_all()
    assert [f["active"] for f in table.findings("gpu-1/vllm-0/engine/-") or []] == [False, True]


def test_quiet_stream_decides_its_findings_only_after_quiet_seconds() -> None:
    clock = Clock()
    table, events = table_with_events(FleetConfig(quiet_seconds=1.0), clock)
    table.ingest([(sid(), OOM)])
    table.tick()
    assert events == []  # the failure's last lines may still come
    clock.t += 1.0
    table.tick()
    assert events == [("firing", "vllm.kv-cache.max-len-exceeds")]


def test_an_open_finding_is_decided_quiet_seconds_after_it_opened_while_lines_keep_coming() -> None:
    clock = Clock()
    table, events = table_with_events(FleetConfig(quiet_seconds=1.0), clock)
    table.ingest([(sid(), OOM)])
    for _ in range(3):  # a line every 0.4 s: never quiet
        clock.t += 0.4
        table.ingest([(sid(), b"INFO: still serving\n")])
        table.tick()
    assert events == [("firing", "vllm.kv-cache.max-len-exceeds")]


def test_idle_streams_are_evicted_and_keep_their_findings() -> None:
    clock = Clock()
    table, _events = table_with_events(FleetConfig(idle_seconds=60), clock)
    table.ingest([(sid(), OOM)])
    clock.t += 59
    table.tick()
    assert table.open_streams() == 1
    clock.t += 1
    table.tick()
    assert table.open_streams() == 0 and table.counts["evicted_idle"] == 1
    assert len(table.findings("gpu-1/vllm-0/engine/-") or []) == 1


def test_streams_beyond_max_evict_the_least_recently_fed() -> None:
    clock = Clock()
    table, _events = table_with_events(FleetConfig(max_streams=2), clock)
    for node in ("a", "b", "a", "c"):
        clock.t += 1
        table.ingest([(sid(node), b"hello\n")])
    assert table.open_streams() == 2 and table.counts["evicted_full"] == 1
    assert {s["key"].split("/")[0]: s["open"] for s in table.streams()} == {"a": True, "b": False, "c": True}


def test_a_stream_holding_too_much_decides_early() -> None:
    table, _events = table_with_events(FleetConfig(stream_bytes=4096))
    progress = b"".join(b"INFO 05-01 12:00:%02d Avg prompt throughput: 1.0 tokens/s, Running: 1 reqs\n" % (i % 60)
                        for i in range(400))
    table.ingest([(sid(), progress)])
    assert table.counts["flushed_full"] >= 1


def test_back_pressure_refuses_a_batch_while_too_much_is_analysed() -> None:
    table, _events = table_with_events(FleetConfig(inflight_bytes=len(OOM) + 10, retry_after=3))
    entered, release = threading.Event(), threading.Event()

    def hold(_ff: FleetFinding) -> None:
        entered.set()
        release.wait(60)

    table.on_finding.append(hold)
    worker = threading.Thread(target=lambda: (table.ingest([(sid(), OOM + UP * 100)])))
    worker.start()
    try:
        assert entered.wait(60)
        with pytest.raises(Busy) as exc:
            table.ingest([(sid("b"), b"x" * 20 + b"\n")])
        assert exc.value.retry_after == 3 and table.counts["rejected"] == 1
    finally:
        release.set()
        worker.join(60)
    table.ingest([(sid("b"), b"x" * 20 + b"\n")])  # taken once the first is done


def test_state_file_keeps_findings_and_active_alerts_across_a_restart(tmp_path: Path) -> None:
    cfg = FleetConfig(state_file=str(tmp_path / "state.json"))
    table, _events = table_with_events(cfg)
    table.ingest([(sid(), OOM)])
    table.flush_all()
    again, events2 = table_with_events(cfg)  # a new process
    assert [f.labels["kind"] for f in again.active()] == ["vllm.kv-cache.max-len-exceeds"]
    again.ingest([(sid(), OOM)])  # the shipper re-sends the batch it got no answer for
    again.flush_all()
    (f,) = again.findings("gpu-1/vllm-0/engine/-") or []
    assert f["count"] == 2 and events2 == []
    again.ingest([(sid(), UP)])  # any "up" line after a restart is after the failure
    assert events2 == [("resolved", "vllm.kv-cache.max-len-exceeds")] and not again.active()


# -- sinks ------------------------------------------------------------------------------------------


def one_finding() -> FleetFinding:
    table, _events = table_with_events()
    table.ingest([(sid(), OOM)])
    table.flush_all()
    return table.active()[0]


def wait_for(cond: Any, what: str) -> None:
    deadline = time.monotonic() + 60  # against a hang only
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_alertmanager_sink_retries_until_delivered_and_resends_active_alerts() -> None:
    posts: list[tuple[str, Any]] = []
    failures = [2]

    def post(url: str, payload: Any) -> None:
        if failures[0]:
            failures[0] -= 1
            raise ConnectionRefusedError()
        posts.append((url, payload))

    ff = one_finding()
    cfg = FleetConfig(retry_min=0.01, retry_max=0.02, resend_seconds=0.05)
    sink = AlertmanagerSink("http://am:9093/", cfg, lambda: [ff], post)
    sink.put("firing", ff)
    sink.start()
    try:
        wait_for(lambda: len(posts) >= 2, "delivered, then re-sent")
    finally:
        sink.stop()
    assert sink.outcomes["failed"] == 2
    url, alerts = posts[0]
    assert url == "http://am:9093/api/v2/alerts"
    assert [a["labels"]["kind"] for a in alerts] == ["vllm.kv-cache.max-len-exceeds"]
    assert posts[1][1][0]["labels"] == alerts[0]["labels"]  # the re-send is the same alert


def test_alertmanager_queue_keeps_the_latest_state_of_each_alert() -> None:
    ff = one_finding()
    sink = AlertmanagerSink("http://am", FleetConfig(), lambda: [], lambda u, p: None)
    sink.put("firing", ff)
    ff.ends_at = 1_700_000_100.0
    sink.put("resolved", ff)
    assert sink.queued() == 1
    (alert,) = sink._payload(sink._take())
    assert alert["endsAt"] == "2023-11-14T22:15:00.000Z"


def test_event_sinks_bounded_queue_drops_oldest_and_counts() -> None:
    ff = one_finding()
    sink = WebhookSink("http://hook", FleetConfig(sink_queue=2), lambda u, p: None)
    for ev in ("firing", "resolved", "firing"):
        sink.put(ev, ff)
    assert sink.queued() == 2 and sink.outcomes["dropped"] == 1
    assert sink._payload(sink._take())["status"] == "resolved"


def test_slack_and_webhook_payloads() -> None:
    ff = one_finding()
    slack = SlackSink("http://slack", FleetConfig(), lambda u, p: None)._payload(("firing", ff))
    assert slack["text"].splitlines()[:4] == [
        ":rotating_light: *KV cache cannot hold one request of the model's max length: The KV cache holds "
        "28.57 GiB but one 202752-token sequence needs 71.16 GiB.*",
        "node `gpu-1` / pod `vllm-0` / container `engine`",
        "kind `vllm.kv-cache.max-len-exceeds` · cause `kv-cache-too-small`",
        "*Try first:* Limit the context to 81392 tokens",
    ]
    hook = WebhookSink("http://hook", FleetConfig(), lambda u, p: None)._payload(("firing", ff))
    assert hook["status"] == "firing" and hook["finding"]["rule"] == "vllm.v1.kv-cache.max-len-exceeds"


def test_dispatcher_sends_to_each_configured_sink() -> None:
    got: list[str] = []
    cfg = FleetConfig(alertmanager_url="http://am", slack_webhook_url="http://slack", webhook_url="http://hook",
                      retry_min=0.01)
    d = Dispatcher(cfg, lambda: [], lambda url, payload: got.append(url))
    assert [s.name for s in d.sinks] == ["alertmanager", "slack", "webhook"]
    d.start()
    try:
        d("firing", one_finding())
        wait_for(lambda: len(got) == 3, "three deliveries")
    finally:
        d.stop()
    assert sorted(got) == ["http://am/api/v2/alerts", "http://hook", "http://slack"]


def test_config_from_env() -> None:
    cfg = FleetConfig.from_env({
        "OOMDOCTOR_FLEET_MESSAGE_FIELDS": "msg, log", "OOMDOCTOR_FLEET_MAX_STREAMS": "5",
        "OOMDOCTOR_ALERTMANAGER_URL": "http://am:9093", "OOMDOCTOR_FLEET_QUIET_SECONDS": "0.5",
    })
    assert (cfg.message_fields, cfg.max_streams, cfg.alertmanager_url, cfg.quiet_seconds) == (
        ("msg", "log"), 5, "http://am:9093", 0.5)
    with pytest.raises(ValueError, match="OOMDOCTOR_FLEET_MAX_STREAMS"):
        FleetConfig.from_env({"OOMDOCTOR_FLEET_MAX_STREAMS": "many"})
    with pytest.raises(ValueError, match="http"):
        FleetConfig.from_env({"OOMDOCTOR_ALERTMANAGER_URL": "am:9093"})


def test_a_failure_cut_by_a_restart_is_found_once_from_the_tail_kept_at_shutdown(tmp_path: Path) -> None:
    cfg = FleetConfig(state_file=str(tmp_path / "state.json"))
    cut = OOM.index(b"ValueError: To serve")
    before, after = OOM[:cut], OOM[cut:]
    first, events = table_with_events(cfg)
    first.ingest([(sid(), UP + before)])
    first.save()  # shutdown: nothing decided yet, the tail kept
    assert events == []
    second, events2 = table_with_events(cfg)
    second.ingest([(sid(), after)])
    second.flush_all()
    (f,) = second.findings("gpu-1/vllm-0/engine/-") or []
    whole, _events = table_with_events()
    whole.ingest([(sid(), UP + OOM)])
    whole.flush_all()
    (g,) = whole.findings("gpu-1/vllm-0/engine/-") or []
    assert essentials(f["finding"]) == essentials(g["finding"])
    assert events2 == [("firing", "vllm.kv-cache.max-len-exceeds")]
    assert (second.streams()[0]["lines"], second.streams()[0]["bytes"]) == (
        (UP + OOM).count(b"\n"), len(UP + OOM))
    # and once more: the tail of a decided failure is read again without telling it twice
    second.save()
    third, events3 = table_with_events(cfg)
    third.ingest([(sid(), b"INFO: still failing\n")])
    third.flush_all()
    assert len(third.findings("gpu-1/vllm-0/engine/-") or []) == 1 and events3 == []
