"""A log's diagnosis does not depend on how it reached us: every fixture, with each of its lines
wrapped the way a log collector, a terminal or a paste wraps it, gives the same failures (kind,
phase, every figure, line numbers) as the log itself."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest

import oomdoctor
from tests.corpus import FIXTURES
from tests.sampling import stratified

#: what a collector, a launcher or a paste puts before each line
PREFIXES: dict[str, bytes] = {
    "docker compose": b"vllm-1  | ",
    "docker service logs": b"vllm.1.k5d7rxq4z3n7@worker1    | ",
    "kubernetes CRI": b"2024-05-01T10:00:00.123456789Z stderr F ",
    "kubectl logs --timestamps": b"2024-05-01T10:00:00.123456789Z ",
    "kubectl logs --prefix": b"[pod/vllm-7d9f6c-x2x4q/vllm] ",
    "journald": b"May 01 10:00:00 gpu-node-1 vllm[1234]: ",
    "Ray worker": b"(RayWorkerWrapper pid=1234, ip=10.0.0.2) ",
    "SkyPilot": b"(worker1, rank=1, pid=5678, ip=10.0.0.3) ",
    "Slurm srun --label": b"0: ",
    "pdsh (DeepSpeed multi-node)": b"gpu-node-1: ",
    "Open MPI --tag-output": b"[1,0]<stderr>:",
    "SageMaker (MPI)": b"[1,mpirank:0,algo-1]<stdout>:",
    "aws logs tail": b"2024-05-01T10:00:00.123000+00:00 ecs/vllm/1a2b3c4d ",
    "CloudWatch console copy": b"1714557600123\t",
    "RunPod serverless": b"2024-05-01T10:00:00.123456789Z ERROR  | sync-5e1c2f7a-u1 | ",
    "Modal": b"2024-05-01 12:00:00+02:00 fu-Ab3dE5gH7jK9mN1pQ3 ta-01HX7Y8Z9ABCDEF ",
    "Python logging": b"2024-05-01 10:00:00,123 INFO ",
    "GitHub Actions": b"2024-05-01T10:00:00.1234567Z ",
    "quoted paste": b"> ",
    "indented paste": b"    ",
    "tab-indented paste": b"\t",
}


def _docker_json(line: bytes) -> bytes:
    record = {"log": line.decode("utf-8", "replace") + "\n", "stream": "stderr", "time": "2024-05-01T10:00:00Z"}
    return json.dumps(record).encode()


def _record(**fields: object) -> Callable[[bytes], bytes]:
    """A JSON record in a collector's documented layout; the value ``MSG`` stands for the line."""

    def fill(value: object, msg: str) -> object:
        if value == "MSG":
            return msg
        if isinstance(value, dict):
            return {k: fill(v, msg) for k, v in value.items()}
        return value

    return lambda line: json.dumps(fill(fields, line.decode("utf-8", "replace"))).encode()


#: JSON log records, each in its collector's documented export layout
ENVELOPES: dict[str, Callable[[bytes], bytes]] = {
    "docker json-file": _docker_json,
    # Google Cloud Logging LogEntry: a text entry, and a structured one (jsonPayload.message)
    "GCP textPayload": _record(textPayload="MSG", severity="ERROR", resource={"type": "k8s_container"},
                               timestamp="2024-05-01T10:00:00.123456789Z"),
    "GCP jsonPayload": _record(jsonPayload={"message": "MSG", "logger": "vllm"}, severity="ERROR",
                               timestamp="2024-05-01T10:00:00Z"),
    # AWS CloudWatch Logs Insights export
    "CloudWatch": _record(**{"@timestamp": "2024-05-01 10:00:00.123", "@logStream": "ecs/vllm/1a2b",
                             "@message": "MSG"}),
    # Azure Monitor ContainerLog (LogEntry) and Container Insights v2 ContainerLogV2 (LogMessage is an
    # object for JSON messages, a string otherwise; exported rows carry "log")
    "Azure ContainerLog": _record(TimeGenerated="2024-05-01T10:00:00Z", LogEntry="MSG", LogEntrySource="stderr"),
    "Azure ContainerLogV2": _record(TimeGenerated="2024-05-01T10:00:00Z", LogMessage="MSG", LogSource="stderr",
                                    ContainerName="vllm"),
    "Azure Container Apps": _record(TimeStamp="2024-05-01T10:00:00.1234567+00:00", Log="MSG"),
    # Grafana Loki (logcli --output=jsonl), Elastic/Datadog exports
    "Loki": _record(labels={"app": "vllm"}, line="MSG", timestamp="2024-05-01T10:00:00Z"),
    "Elastic": _record(**{"@timestamp": "2024-05-01T10:00:00Z", "message": "MSG", "log.level": "error"}),
    "Datadog": _record(attributes={"message": "MSG", "service": "vllm"}, id="AQAAAY"),
    # journalctl -o json
    "journald json": _record(MESSAGE="MSG", _PID="1234", _COMM="python3", PRIORITY="3",
                             __REALTIME_TIMESTAMP="1714557600000000"),
    # a docker json-file line shipped as a Loki line
    "docker json-file in Loki": lambda line: json.dumps(
        {"line": _docker_json(line).decode(), "timestamp": "2024-05-01T10:00:00Z"}).encode(),
}


#: what each transport makes of one line
TRANSPORTS: dict[str, Callable[[bytes], bytes]] = {
    **{name: (lambda line, p=prefix: p + line) for name, prefix in PREFIXES.items()},
    "CRLF": lambda line: line + b"\r",
    "aws logs get-log-events --output text": lambda line: b"EVENTS\t1714557600456\t" + line + b"\t1714557600123",
    "colour": lambda line: b"\x1b[32m" + line + b"\x1b[0m",
    **ENVELOPES,
}

LOGS = sorted(FIXTURES.glob("**/*.log"))
#: the default run checks each log under this many transports (tests/sampling.py); ``-m slow``
#: checks every log under every transport
PER_LOG = 2


def _failures(data: bytes) -> list[tuple[object, ...]]:
    report = oomdoctor.diagnose(data, source="log")
    return sorted(
        (f.kind, f.phase, f.location.line, f.location.end_line, sorted((k, repr(v)) for k, v in f.figures.items()))
        for f in report.findings
        if f.severity == "error"
    )


@cache
def _want(log: Path) -> list[tuple[object, ...]]:
    return _failures(log.read_bytes())


def _wrapped(log: Path, transport: str) -> bytes:
    wrap = TRANSPORTS[transport]
    return b"\n".join(wrap(line) if line else line for line in log.read_bytes().split(b"\n"))


#: known failures (log stem -> the transports that lose it), strict: each must go when the tool
#: handles it, and no other pair may fail
_WRAPPED_MID_WORD = (
    "the message is hard-wrapped mid-word ('KV cach' / 'e is needed'); with a prefix on both halves "
    "the halves are no longer joined and the failure is lost"
)
_WRAPPED_MESSAGE = (
    "the message is hard-wrapped at 140 columns ('Tried to allocate' / '666.00 MiB. GPU 3 ...'); with a "
    "prefix on every piece the pieces are no longer joined and only vLLM's own error line is read"
)
TRANSPORT_GAPS: dict[str, tuple[str, frozenset[str]]] = {
    "new-003": (_WRAPPED_MID_WORD, frozenset([*PREFIXES, "aws logs get-log-events --output text"])),
    "fresh-107": (_WRAPPED_MESSAGE, frozenset([*PREFIXES, "aws logs get-log-events --output text"])),
}


def _gap(log: Path, transport: str) -> str | None:
    reason, transports = TRANSPORT_GAPS.get(log.stem, ("", frozenset()))
    return reason if transport in transports else None


def _sample_params() -> list[object]:
    return [
        pytest.param(log, t, id=f"{log.stem}-{t}",
                     marks=[pytest.mark.xfail(reason=gap, strict=True)] if (gap := _gap(log, t)) else [])
        for log, t in _sample_pairs()
    ]


def _sample_pairs() -> list[tuple[Path, str]]:
    pairs = stratified(LOGS, list(TRANSPORTS), PER_LOG)
    # a log with a known gap is checked by default under every transport, each pair a test of its
    # own: the gaps as strict xfails (they show when fixed), the others as plain tests, so the
    # xfails hide none of that log's other transports (its sampled pairs may all be gaps)
    gapped = [log for log in LOGS if log.stem in TRANSPORT_GAPS]
    pairs += [(log, t) for log in gapped for t in TRANSPORTS if (log, t) not in pairs]
    return pairs


@pytest.mark.parametrize(("log", "transport"), _sample_params())
def test_a_transport_around_every_line_changes_no_failure(log: Path, transport: str) -> None:
    assert _failures(_wrapped(log, transport)) == _want(log)


@pytest.mark.slow
@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_a_transport_around_every_line_of_every_log_changes_no_failure(transport: str) -> None:
    """The whole grid: every log under this transport; exactly the known gaps differ."""
    lost = [log.stem for log in LOGS if _failures(_wrapped(log, transport)) != _want(log)]
    assert lost == [log.stem for log in LOGS if _gap(log, transport)]


def test_the_sample_takes_every_log_and_every_transport() -> None:
    pairs = stratified(LOGS, list(TRANSPORTS), PER_LOG)
    assert {log for log, _ in pairs} == set(LOGS)
    assert {t for _, t in pairs} == set(TRANSPORTS)


def test_a_log_with_a_known_gap_is_checked_under_every_other_transport_by_default() -> None:
    pairs = _sample_pairs()
    for stem, (_, lost) in TRANSPORT_GAPS.items():
        log = next(p for p in LOGS if p.stem == stem)
        others = {t for t in TRANSPORTS if t not in lost}
        assert others, f"{stem}: a gap under every transport hides the log: drop it from the corpus or fix it"
        assert others <= {t for p, t in pairs if p == log}, stem


def test_the_fixtures_hold_failures_to_compare() -> None:
    assert len(LOGS) > 80
    assert sum(bool(_want(p)) for p in LOGS) > 60
