"""Phase evidence printed all the time (throughput lines, loss dicts) is read lazily: only the
latest progress line before a failure, and the lines near one, are read. The findings are the
ones reading every line gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomdoctor.prefilter import make_prefilter
from oomdoctor.report import Report
from oomdoctor.rulepack import default_pack
from oomdoctor.scanner import DEFER_BYTES, DEFER_KEEP, Scanner, scan_triggers
from tests.sampling import slow_but

PACK = default_pack()
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.00 GiB is free.\n"
STATS = "INFO 08-19 00:00:20 [loggers.py:123] Engine 000: Avg prompt throughput: {n}.0 tokens/s, Running: 3 reqs\n"


def scan(data: bytes, *, every_line: bool = False, chunk: int = 1 << 20) -> Report:
    if every_line:  # one prefilter for every trigger: evidence lines are candidates, read as they come
        scanner = Scanner(PACK, source="<test>", advise=False, prefilter=make_prefilter(scan_triggers(PACK)))
        scanner._defers = lambda *_: False  # type: ignore[method-assign]
    else:
        scanner = Scanner(PACK, source="<test>", advise=False)
    for i in range(0, len(data), chunk):
        scanner.feed(data[i : i + chunk])
    return scanner.close()


def findings(report: Report) -> list[dict]:
    return [f.model_dump(exclude={"remedies"}) for f in report.findings]


def test_the_latest_progress_line_names_the_step_after_many_deferred_ones() -> None:
    # more stats lines than are held before the older ones are settled
    log = "Loading safetensors checkpoint shards: 100% 4/4\n" + "".join(
        STATS.format(n=i) for i in range(2 * DEFER_KEEP + 300)
    ) + OOM
    report = scan(log.encode())
    assert [(f.rule, f.phase) for f in report.findings] == [("torch.cuda-oom", "inference")]
    assert findings(report) == findings(scan(log.encode(), every_line=True))


def test_long_deferred_lines_are_settled_by_their_bytes_too() -> None:
    pad = "x" * 4000
    count = DEFER_BYTES // 4000 + 200  # more bytes than are held, far fewer lines than DEFER_KEEP
    scanner = Scanner(PACK, source="<test>", advise=False)
    scanner.feed(b"Loading safetensors checkpoint shards: 100% 4/4\n")
    held = 0
    for i in range(count):
        scanner.feed(STATS.format(n=i).replace("reqs", pad).encode())
        held = max(held, sum(len(raw) for _, raw, _ in scanner._deferred))
    assert held <= DEFER_BYTES
    scanner.feed(OOM.encode())
    assert [(f.rule, f.phase) for f in scanner.close().findings] == [("torch.cuda-oom", "inference")]


def test_a_line_that_holds_the_trigger_but_is_no_progress_line_does_not_win() -> None:
    # "AVG PROMPT THROUGHPUT" holds the (caseless) trigger, not the progress pattern: the
    # checkpoint line before them stays the latest progress line
    log = "Loading safetensors checkpoint shards: 100% 4/4\n" + "".join(
        STATS.format(n=i).upper() for i in range(DEFER_KEEP * 2 + 10)
    ) + OOM
    report = scan(log.encode())
    assert [(f.rule, f.phase) for f in report.findings] == [("torch.cuda-oom", "weights-load")]


def test_loss_dicts_between_tqdm_pieces_keep_the_training_phase() -> None:
    bar = "".join(f"\r {i}%|\u2588\u2588        | {i}/100 [00:0{i % 10}<00:10,  1.00s/it]" for i in range(10))
    log = "***** Running training *****\n" + "".join(
        f"{bar}\r{{'loss': 0.{i:04d}, 'learning_rate': 1e-05, 'epoch': 0.1}}\n" for i in range(3000)
    ) + "Traceback (most recent call last):\n" + '  File "t.py", line 1, in training_step\n' + OOM
    report = scan(log.encode(), chunk=4096)
    assert [(f.rule, f.phase) for f in report.findings] == [("torch.cuda-oom", "training")]
    assert findings(report) == findings(scan(log.encode(), every_line=True))


@pytest.mark.parametrize("path", sorted(FIXTURES.rglob("*.log")), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fixtures_give_the_findings_reading_every_line_gives(path: Path) -> None:
    data = path.read_bytes()
    assert findings(scan(data)) == findings(scan(data, every_line=True))


def _count_calls(scanner: Scanner, name: str) -> list[int]:
    calls = [0]
    inner = getattr(scanner, name)

    def counted(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        return inner(*args, **kwargs)

    setattr(scanner, name, counted)
    return calls


def _scan_counting(data: bytes, chunk: int, name: str) -> tuple[Report, int]:
    scanner = Scanner(PACK, source="<test>", advise=False)
    calls = _count_calls(scanner, name)
    for i in range(0, len(data), chunk):
        scanner.feed(data[i : i + chunk])
    return scanner.close(), calls[0]


def docker(line: str) -> str:
    """``line`` as docker's json-file driver writes it (json.dumps escapes what JSON must)."""
    import json

    return json.dumps({"log": line, "stream": "stdout", "time": "2024-08-19T00:04:14.639941460Z"}) + "\n"


@pytest.mark.parametrize("chunk", slow_but([1 << 20, 64 << 10, 4096], 64 << 10))
def test_stats_lines_cut_by_chunk_boundaries_are_not_all_deferred(chunk: int) -> None:
    # each chunk boundary cuts a line, read as a stretch of its own: the evidence before it is
    # kept as raw spans, not deferred line by line (was: every stats line deferred at 64 KiB)
    stats = "".join(STATS.format(n=i) for i in range(20000))
    log = ("Loading safetensors checkpoint shards: 100% 4/4\n" + stats + OOM + stats).encode()
    report, deferred = _scan_counting(log, chunk, "_defer")
    assert [(f.rule, f.phase) for f in report.findings] == [("torch.cuda-oom", "inference")]
    assert findings(report) == findings(scan(log, every_line=True))
    assert deferred < 1000  # of 40,000 stats lines


@pytest.mark.parametrize("access", [False, True])
def test_stats_lines_in_docker_json_records_are_set_aside_unread(access: bool) -> None:
    # a record is set aside like a plain line, though unwrapping changes it (was: every record
    # read where it is; with escaped access lines between them, 128 s for 256 MiB)
    get = 'INFO:     10.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    lines = [docker(STATS.format(n=i)) + (docker(get) if access else "") for i in range(20000)]
    log = (docker("Loading safetensors checkpoint shards: 100% 4/4\n") + "".join(lines) + docker(OOM)).encode()
    report, processed = _scan_counting(log, 1 << 20, "_process")
    assert [(f.rule, f.phase) for f in report.findings] == [("torch.cuda-oom", "inference")]
    assert findings(report) == findings(scan(log, every_line=True))
    assert processed < 1000


def test_records_whose_escapes_hide_a_trigger_give_the_findings_reading_every_line_gives() -> None:
    # the trainer's own JSON loss line inside docker's record: its quotes are escaped, so the
    # raw record does not hold 'loss":' — unwrapped, it does
    loss = "".join(docker(f'{{"loss": 0.{i:04d}, "epoch": 0.1}}\n') for i in range(3000))
    log = (docker("***** Running training *****\n") + docker("Loading safetensors checkpoint shards: 100% 4/4\n")
           + loss + docker(OOM)).encode()
    report = scan(log)
    assert findings(report) == findings(scan(log, every_line=True))
    assert [(f.rule, f.phase) for f in report.findings] == [("torch.cuda-oom", "training")]


def _request_traceback(i: int) -> str:
    """uvicorn's traceback for a client that went away: frames, two of them in vLLM's package."""
    site = "/usr/local/lib/python3.12/dist-packages"
    frames = [("uvicorn/protocols/http/httptools_impl.py", "run_asgi"), ("starlette/routing.py", "handle"),
              ("vllm/entrypoints/openai/api_server.py", "create_chat_completion"),
              ("vllm/v1/engine/async_llm.py", "generate")]
    body = "".join(f'  File "{site}/{path}", line {10 + i % 7}, in {func}\n    await x()\n' for path, func in frames)
    return "ERROR:    Exception in ASGI application\nTraceback (most recent call last):\n" + body + (
        "asyncio.exceptions.CancelledError\n"
    )


@pytest.mark.parametrize("chunk", [1 << 20, 4096])
def test_tracebacks_far_from_any_failure_are_set_aside_unread(chunk: int) -> None:
    # a server logging a traceback per cancelled request: frame lines far from the failure tell
    # nothing about it (was: every frame read, ~35 µs each; 19 s for 256 MiB)
    noise = "".join(STATS.format(n=i) + _request_traceback(i) for i in range(3000))
    near = (
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 1, in load_model\n'
        "    self.model = get_model()\n"
    )
    log = ("Loading safetensors checkpoint shards: 100% 4/4\n" + noise + near + OOM + noise).encode()
    report, processed = _scan_counting(log, chunk, "_process")
    assert [(f.rule, f.phase, f.engine) for f in report.findings] == [("torch.cuda-oom", "weights-load", "vllm")]
    assert findings(report) == findings(scan(log, every_line=True))
    assert report.context.engine == "vllm"  # the frames near the failure still vote
    assert processed < 1000  # of 2 x 3000 tracebacks (30,000 candidate lines)


def test_tracebacks_in_docker_json_records_are_set_aside_unread_too() -> None:
    # each frame is a record with escaped quotes (File \"...\"): its bytes hold the frame's
    # needles in their JSON form, so it is set aside like a plain frame (was: every record
    # unwrapped and read; 5x grep with hyperscan on k8s-tracebacks); the frames near the
    # failure are read, and name its step and engine
    noise = "".join(docker(ln + "\n") for i in range(3000)
                    for ln in (STATS.format(n=i) + _request_traceback(i)).splitlines())
    near = "".join(docker(ln + "\n") for ln in (
        "Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 1, in load_model',
        "    self.model = get_model()",
    ))
    log = (docker("Loading safetensors checkpoint shards: 100% 4/4\n") + noise + near + docker(OOM) + noise).encode()
    report, processed = _scan_counting(log, 1 << 20, "_process")
    assert [(f.rule, f.phase, f.engine) for f in report.findings] == [("torch.cuda-oom", "weights-load", "vllm")]
    assert findings(report) == findings(scan(log, every_line=True))
    assert processed < 1000


def test_an_engines_first_vote_is_its_lowest_line_whatever_the_order_votes_come_in() -> None:
    # deferred lines are read after later ones: a tie between engines goes to the one voted for
    # on the earliest line, not the one read first
    from oomdoctor.context import ContextCollector

    collector = ContextCollector()
    for engine, line in (("sglang", 20), ("vllm", 10), ("sglang", 5), ("vllm", 30)):
        collector.vote_engine(engine, line)
    assert collector.engine() == "sglang"
    listed = ContextCollector()
    for package, line in (("sglang", 20), ("vllm", 10), ("sglang", 5), ("vllm", 30)):
        listed.list_engine(package, line)
    assert listed.engine() == "sglang"


def test_the_latest_progress_line_is_the_latest_by_number_not_the_last_read() -> None:
    # the checkpoint line is set aside; the KV cache line (a context line too) is read as it
    # comes; the failure then reads the checkpoint line, after it: the later line still wins
    log = (
        "Loading safetensors checkpoint shards: 100% 4/4\n"
        "INFO 08-19 00:00:40 [gpu_worker.py:232] Available KV cache memory: 34.76 GiB\n" + OOM
    ).encode()
    report = scan(log)
    assert [(f.rule, f.phase) for f in report.findings] == [("torch.cuda-oom", "kv-cache-alloc")]
    assert findings(report) == findings(scan(log, every_line=True))


def _decode(i: int) -> str:
    return (f"[2025-06-01 10:00:{i % 60:02d} TP0] Decode batch. #running-req: {i % 150 + 1}, #token: {1000 + i}, "
            f"token usage: 0.{i % 90 + 10}, gen throughput (token/s): 1234.00, #queue-req: 0\n")


_SGLANG_OOM = (
    "[2025-06-01 11:00:00 TP0] Decode out of memory. Try to lower your batch size.\n"
    "Try to allocate 48 tokens.\nAvaliable tokens: 2048\n"
    "self.token_to_kv_pool_allocator.available_size()=1984\nself.tree_cache.evictable_size()=64\n"
)


def _context(report: Report) -> dict:
    return report.context.model_dump()


@pytest.mark.parametrize(
    ("chunk", "wrapped"),
    slow_but([(c, w) for w in (False, True) for c in (1 << 20, 64 << 10, 4096)], (4096, False), (1 << 20, True),
             ids=lambda v: f"{v[0]}-{'wrapped' if v[1] else 'plain'}"),
)
def test_periodic_lines_are_set_aside_and_the_latest_gives_the_fact(chunk: int, wrapped: bool) -> None:
    # SGLang's Decode batch line (a periodic context: running requests) under load: half the log.
    # Only the latest before each point the context is read is read (was: every one, ~35 us each;
    # ~100x grep on bench's sglang-serving)
    access = '[2025-06-01 10:00:00] INFO:     127.0.0.1:5555 - "POST /generate HTTP/1.1" 200 OK\n'
    lines = [_decode(i) + access for i in range(20000)]
    text = "".join(lines[:10000]) + _SGLANG_OOM + "".join(lines[10000:19999]) + _decode(77)
    log = ("".join(docker(ln + "\n") for ln in text.splitlines()) if wrapped else text).encode()
    report, processed = _scan_counting(log, chunk, "_process")
    every = scan(log, every_line=True, chunk=chunk)
    assert [f.rule for f in report.findings] == ["sglang.kv-pool-exhausted"]
    assert findings(report) == findings(every)
    assert _context(report) == _context(every)
    assert report.context.extra["sglang_running_requests"] == 78  # the last line's
    assert processed < 1000


def test_a_periodic_value_read_out_of_order_does_not_replace_a_later_one() -> None:
    from oomdoctor.context import ContextCollector

    collector = ContextCollector()
    collector.apply_groups({"sglang_running_requests": "9"}, None, {}, "sglang", at=900)
    collector.apply_groups({"sglang_running_requests": "3"}, None, {}, "sglang", at=100)  # read later
    collector.apply_groups({"max_model_len": "4096"}, None, {}, None, at=100)
    collector.apply_args({"max_model_len": "8192"}, at=50)  # an earlier line's launch arguments
    assert collector.context.extra["sglang_running_requests"] == 9
    assert collector.context.max_model_len == 4096
    collector.apply_groups({"sglang_running_requests": "5"}, None, {}, "sglang", at=901)
    assert collector.context.extra["sglang_running_requests"] == 5


def test_a_periodic_line_is_read_at_its_latest_even_when_a_later_one_does_not_match() -> None:
    # the trigger without the rule's pattern ("#running-req:" outside a batch line) reads nothing:
    # the search goes on to the line before it
    noise = "".join(STATS.format(n=i) for i in range(5000))
    log = (_decode(41) + noise + "debug: #running-req: unknown\n" + noise + OOM).encode()
    report = scan(log)
    assert _context(report) == _context(scan(log, every_line=True))
    assert report.context.extra["sglang_running_requests"] == 42


def test_a_warning_printed_again_and_again_leaves_the_evidence_for_the_failure_after_it() -> None:
    """SGLang retracting requests under load prints its warning every few lines. Its rule names
    its phase, so the evidence set aside before each is not read for it: the failure after them
    still gets its phase from the latest progress line, and the context the latest periodic
    value, as reading every line gives."""
    batch = (
        "[2025-06-01 00:00:0{s} TP0] Decode batch. #running-req: {n}, #token: 4096, token usage: 0.45, "
        "gen throughput (token/s): 512.00, #queue-req: 0\n"
    )
    retract = (
        "[2025-06-01 00:00:01 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, "
        "#new_token_ratio: 0.4000 -> 0.5000\n"
    )
    access = '[2025-06-01 00:00:00] INFO:     10.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    lines: list[str] = []
    for i in range(6000):
        # batch lines until the failure, then only requests and warnings: its phase comes from
        # the evidence before it
        lines += [access, batch.format(s=i % 10, n=i)] if i < 3000 else [access, access]
        if i % 10 == 9:
            lines.append(retract)
        if i == 2999:  # a failure amid them, closed long before the log ends
            lines.append("[2025-06-01 00:00:02 TP0] " + OOM)
    log = "".join(lines).encode()
    for chunk in (1 << 20, 4096):
        report = scan(log, chunk=chunk)
        assert [(f.rule, f.phase, f.occurrences) for f in report.findings] == [
            ("sglang.kv-pool-retract", "inference", 600),
            ("torch.cuda-oom", "inference", 1),
        ]
        assert report.context.extra["sglang_running_requests"] == 2999
        assert findings(report) == findings(scan(log, every_line=True, chunk=chunk))


def _eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """Search each span behind the tail as it leaves it, as before spans were searched lazily."""
    import oomdoctor.scan.evidence as evidence

    monkeypatch.setattr(evidence, "UNSEARCHED_SPANS", 0)


@pytest.mark.parametrize("chunk", slow_but([1 << 20, 64 << 10, 4096], 64 << 10))
def test_a_progress_line_many_spans_back_still_names_the_step(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # the spans searched newest first hold no progress line: the search goes back to the one that has
    noise = "".join(STATS.format(n=i).upper() for i in range(40000))  # ~4 MiB, no progress line
    log = ("Loading safetensors checkpoint shards: 100% 4/4\n" + noise + OOM).encode()
    report, searched = _scan_counting(log, chunk, "_latest_progress")
    assert [(f.rule, f.phase) for f in report.findings] == [("torch.cuda-oom", "weights-load")]
    assert findings(report) == findings(scan(log, every_line=True, chunk=chunk))
    _eager(monkeypatch)
    eager, searched_eagerly = _scan_counting(log, chunk, "_latest_progress")
    assert findings(eager) == findings(report)
    assert searched <= searched_eagerly


@pytest.mark.parametrize("chunk", [1 << 20, 64 << 10, 4096])
def test_spans_searched_lazily_leave_what_searching_each_as_it_came_leaves(
    chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The context asked for mid-stream (a live report) and at the end, and the findings, are
    the same whether the spans behind the tail are searched as they leave it or later, newest
    first; later is what saves the searches."""
    access = '[2025-06-01 10:00:00] INFO:     127.0.0.1:5555 - "POST /generate HTTP/1.1" 200 OK\n'
    text = "".join(_decode(i) + access for i in range(12000)) + _SGLANG_OOM + "".join(
        _decode(i) + access for i in range(12000, 30000)
    )
    log = text.encode()

    def run() -> tuple[list[dict], list[dict], list[dict], int]:
        scanner = Scanner(PACK, source="<test>", advise=False)
        searches = _count_calls(scanner, "_latest_progress")
        contexts = []
        for n, i in enumerate(range(0, len(log), chunk)):
            scanner.feed(log[i : i + chunk])
            if n % 37 == 5:
                contexts.append(scanner.context().model_dump())
        report = scanner.close()
        return findings(report), contexts, [_context(report)], searches[0]

    lazy = run()
    _eager(monkeypatch)
    eager = run()
    assert lazy[:3] == eager[:3]
    assert lazy[1][-1]["extra"].get("sglang_running_requests")  # (read mid-stream)
    if chunk >= 64 << 10:
        assert lazy[3] * 2 < eager[3]


@pytest.mark.parametrize("chunk", [1 << 20, 4096])
def test_a_line_that_only_names_its_engine_is_set_aside_like_evidence(chunk: int) -> None:
    """ollama writes its name (a model path, ``source=sched.go``) on most lines, TGI its router's:
    a line whose rules only vote for the engine is set aside like phase evidence, and read (and
    votes) only near a failure (was: every line read, 28-54x grep). The engine and the findings
    are the ones reading every line gives."""
    gin = '[GIN] 2025/06/01 - 10:00:00 | 200 |  1.234567s |       127.0.0.1 | POST     "/api/chat"\n'
    sched = 'time=2025-06-01T10:00:00.000Z level=DEBUG source=sched.go:575 msg="evaluating already loaded" model=/root/.ollama/models/blobs/sha256-{n:064x}\n'
    log = ("".join(gin + sched.format(n=i) for i in range(20000)) + OOM).encode()
    report, processed = _scan_counting(log, chunk, "_process")
    every = scan(log, every_line=True, chunk=chunk)
    assert report.context.engine == every.context.engine == "ollama"
    assert findings(report) == findings(every)
    assert processed < 1000
