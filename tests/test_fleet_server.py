"""``POST /v1/ingest``, ``GET /v1/streams``, ``/v1/streams/{key}/findings`` and ``/metrics`` over
real HTTP (uvicorn on 127.0.0.1, a free port)."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")
httpx = pytest.importorskip("httpx")

from oomdoctor.fleet.config import FleetConfig  # noqa: E402
from oomdoctor.server.config import ConfigError, ServerConfig  # noqa: E402
from tests.test_server import running  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OOM = (ROOT / "fixtures/vllm/vllm-054.log").read_bytes()
TOKEN = "fleet-token-1"
KEY = "gpu-1/vllm-0/engine/-"


def ndjson(text: bytes) -> bytes:
    meta = {"kubernetes": {"host": "gpu-1", "pod_name": "vllm-0", "container_name": "engine"}}
    return b"\n".join(json.dumps({"log": line, **meta}).encode() for line in text.decode().splitlines())


def cfg(**fleet: object) -> ServerConfig:
    return ServerConfig(api_token=TOKEN, fleet=FleetConfig(**fleet))  # type: ignore[arg-type]


AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_ingest_needs_the_token_as_diagnose_does() -> None:
    with running(cfg()) as url:
        r = httpx.post(url + "/v1/ingest", content=ndjson(OOM), headers={"content-type": "application/x-ndjson"})
        assert (r.status_code, r.json()) == (401, {"error": "missing bearer token"})
        assert httpx.get(url + "/v1/streams").status_code == 401
        assert httpx.get(url + f"/v1/streams/{KEY}/findings").status_code == 401


def test_ndjson_batches_make_one_finding_listed_per_stream_and_counted_in_metrics() -> None:
    body = ndjson(OOM).split(b"\n")
    half = len(body) // 2
    with running(cfg()) as url, httpx.Client(base_url=url, headers={**AUTH, "content-type": "application/x-ndjson"}) as c:
        for part in (body[:half], body[half:]):  # the failure cut in two batches
            r = c.post("/v1/ingest", content=b"\n".join(part))
            assert r.status_code == 200, r.text
        assert r.json() == {"lines": len(body) - half, "streams": 1}
        # (the stream's findings are decided after quiet_seconds: polled, never slept on)
        deadline = time.monotonic() + 60  # against a hang only
        while True:
            found = c.get(f"/v1/streams/{KEY}/findings").json()["findings"]
            if found or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert [f["labels"]["kind"] for f in found] == ["vllm.kv-cache.max-len-exceeds"]
        assert found[0]["annotations"]["command"] == "--max-model-len 81392" and found[0]["active"] is True
        (s,) = c.get("/v1/streams").json()["streams"]
        assert (s["key"], s["lines"], s["findings"], s["active"]) == (KEY, len(body), 1, 1)
        metrics = c.get("/metrics").text
        assert ('oomdoctor_findings_total{cause="kv-cache-too-small",kind="vllm.kv-cache.max-len-exceeds",'
                'node="gpu-1",product="vllm-serve",severity="error"} 1.0') in metrics
        assert f"oomdoctor_ingest_lines_total {float(len(body))}" in metrics
        assert "oomdoctor_streams_open 1.0" in metrics
        assert 'oomdoctor_http_requests_total{route="/v1/ingest",status="200"} 2.0' in metrics
        assert c.get("/v1/streams/nope/findings").status_code == 404


def test_text_plain_needs_a_stream_key_and_takes_gzip() -> None:
    with running(cfg()) as url, httpx.Client(base_url=url, headers=AUTH) as c:
        r = c.post("/v1/ingest", content=OOM, headers={"content-type": "text/plain"})
        assert (r.status_code, r.json()["error"]) == (400, "a text/plain batch needs its stream key in the query: ?stream=KEY")
        r = c.post("/v1/ingest?stream=job-7&node=gpu-9", content=gzip.compress(OOM),
                   headers={"content-type": "text/plain", "content-encoding": "gzip"})
        assert (r.status_code, r.json()) == (200, {"lines": OOM.count(b"\n"), "streams": 1})
        (s,) = c.get("/v1/streams").json()["streams"]
        assert (s["key"], s["labels"]) == ("job-7", {"node": "gpu-9"})
        cut = OOM.index(b"estimated maximum model length")  # in the middle of the failing line
        for part in (OOM[:cut], OOM[cut:]):
            r = c.post("/v1/ingest?stream=job-8", content=part, headers={"content-type": "text/plain"})
            assert r.status_code == 200
        deadline = time.monotonic() + 60  # against a hang only
        while not (found := c.get("/v1/streams/job-8/findings").json()["findings"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [f["finding"]["figures"].get("estimated_max_model_len") for f in found] == [81392]
        r = c.post("/v1/ingest", content=b"x", headers={"content-type": "application/xml"})
        assert r.status_code == 415
        r = c.post("/v1/ingest", content=b'{"log": "a"}\n{"log"', headers={"content-type": "application/json"})
        assert (r.status_code, r.json()["error"]) == (400, "record 2: malformed JSON (JSONDecodeError)")


def test_fleet_settings_come_from_the_environment() -> None:
    c = ServerConfig.from_env({"OOMDOCTOR_FLEET_MESSAGE_FIELDS": "msg", "OOMDOCTOR_ALERTMANAGER_URL": "http://am:9093"})
    assert (c.fleet.message_fields, c.fleet.alertmanager_url) == (("msg",), "http://am:9093")
    with pytest.raises(ConfigError, match="OOMDOCTOR_FLEET_IDLE_SECONDS"):
        ServerConfig.from_env({"OOMDOCTOR_FLEET_IDLE_SECONDS": "soon"})


def test_busy_is_a_429_with_retry_after() -> None:
    import threading

    import uvicorn

    from oomdoctor.fleet.streams import Busy
    from oomdoctor.server.app import create_app
    from tests.test_server import free_port

    app = create_app(cfg())

    def busy(batch: object) -> int:
        raise Busy("100 bytes are being analysed (limit 64)", 7)

    app.state.fleet.table.ingest = busy
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60  # against a hang only
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        r = httpx.post(f"http://127.0.0.1:{port}/v1/ingest?stream=s", content=b"line\n",
                       headers={**AUTH, "content-type": "text/plain"})
    finally:
        server.should_exit = True
        thread.join(10)
    assert (r.status_code, r.headers["retry-after"], r.json()) == (
        429, "7", {"error": "100 bytes are being analysed (limit 64)"})


def test_ingest_lag_is_the_arrival_less_the_records_own_time() -> None:
    """Records stamped an hour ago (Fluent Bit's epoch ``date``, Vector's RFC 3339 ``timestamp``)
    land in the histogram's 900 s+ tail; a record without a time is not observed."""
    old = time.time() - 3600
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(old))
    recs = [{"log": "a", "host": "n1", "date": old}, {"log": "b", "host": "n1", "timestamp": iso}, {"log": "c", "host": "n1"}]
    body = b"\n".join(json.dumps(r).encode() for r in recs)
    with running(cfg()) as url, httpx.Client(base_url=url, headers={**AUTH, "content-type": "application/x-ndjson"}) as c:
        assert c.post("/v1/ingest", content=body).status_code == 200
        metrics = c.get("/metrics").text
    assert "oomdoctor_ingest_lag_seconds_count 2.0" in metrics
    assert 'oomdoctor_ingest_lag_seconds_bucket{le="900.0"} 0.0' in metrics
    assert 'oomdoctor_ingest_lag_seconds_bucket{le="+Inf"} 2.0' in metrics


def test_record_time_reads_epoch_seconds_milliseconds_and_zoned_iso() -> None:
    from oomdoctor.fleet.records import record_time

    assert record_time({"date": 1733450000.5}) == 1733450000.5
    assert record_time({"date": 1733450000500}) == 1733450000.5
    assert record_time({"timestamp": "2024-12-06T02:33:20Z"}) == 1733452400.0
    assert record_time({"ISODATE": "2024-12-06T03:33:20+01:00"}) == 1733452400.0
    assert record_time({"time": "2024-12-06 02:33:20"}) is None  # no zone: no lag claimed
    assert record_time({"date": True, "log": "x"}) is None
