"""The FastAPI application: ``create_app(config)``.

Endpoints: ``POST /v1/diagnose``, ``GET /v1/rules``, ``POST /v1/ingest``, ``GET /v1/streams``,
``GET /v1/streams/{key}/findings`` (bearer token when configured), ``GET /metrics``,
``POST /slack/commands``, ``POST /slack/events`` (Slack request signing), ``POST
/mattermost/commands`` (Mattermost token), ``GET /healthz``, ``GET /openapi.json``.
Every 4xx/5xx body is ``{"error": "..."}``; no log text reaches the server's own logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any, Literal

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from oomdoctor import __version__
from oomdoctor.i18n import N_, _, use_lang
from oomdoctor.report import Report
from oomdoctor.rulepack import RulePack, default_pack
from oomdoctor.server import mattermost as mm
from oomdoctor.server import slack
from oomdoctor.server.config import ServerConfig
from oomdoctor.server.limits import (
    AccessLogMiddleware,
    Analyser,
    BodyBudget,
    BodyLimitMiddleware,
    Deadline,
    ErrorShieldMiddleware,
    LimitError,
    content_codings,
    decode_codings,
    gunzip,
    read_body,
)
from oomdoctor.server.logs import setup_logging

log = logging.getLogger("oomdoctor.server")

Format = Literal["json", "markdown", "slack", "text"]
Lang = Literal["en", "ja"]
#: hints that would make the server read its own files
FORBIDDEN_HINTS = {"model-config", "rules"}
_SLACK_OFF = "Slack is not configured on this server (set OOMDOCTOR_SLACK_SIGNING_SECRET)"
#: the largest unsigned body /slack/commands reads (Slack's ssl_check probe); larger ones are refused unread
SSL_CHECK_MAX = 1024
MAX_HINTS = 32


class DiagnoseRequest(BaseModel):
    """JSON body of ``POST /v1/diagnose``."""

    model_config = ConfigDict(extra="forbid")

    log: str = Field(description="The log text (the failure and the lines before it are enough).")
    hints: dict[str, Any] = Field(
        default_factory=dict,
        description='User facts, e.g. {"gpus": 2, "gpu": "A10G"}: the keys and checks of the CLI\'s --hint '
        "(an unknown key or a value its key does not take is a 422 with the CLI's message).",
        json_schema_extra={"additionalProperties": {"type": ["string", "number"]}},
    )
    format: Format = Field(default="json", description="json (the report), markdown, slack (Block Kit) or text.")
    lang: Lang | None = Field(
        default=None,
        description="Language of the human text: en or ja (default: the lang query parameter, then "
        "Accept-Language, then en). Keys, kinds, cause ids, flags and figures stay the same.",
    )


class RuleInfo(BaseModel):
    id: str
    title: str
    kind: str
    engine: str
    severity: str


class RulesResponse(BaseModel):
    rules: list[RuleInfo]


class Health(BaseModel):
    status: str
    version: str
    rules: int


class ErrorBody(BaseModel):
    error: str


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _clean_hints(hints: dict[str, Any]) -> dict[str, str]:
    """The request's hints, checked as the CLI checks ``--hint`` (:func:`oomdoctor.hints.validate_hints`,
    the same messages), after the limits and the refusal of hints that name server files."""
    from oomdoctor.hints import HintError, hint_key, validate_hints

    if len(hints) > MAX_HINTS:
        raise LimitError(422, f"too many hints ({len(hints)}; at most {MAX_HINTS})")
    for k, v in hints.items():
        key = hint_key(k)
        if not key or len(key) > 64 or len(str(v)) > 256:
            raise LimitError(422, "hint keys must be 1-64 characters and values at most 256")
        if key in FORBIDDEN_HINTS:
            raise LimitError(422, f"hint {key!r} refers to a file on the server and is not accepted over HTTP")
    try:
        return validate_hints(hints)
    except HintError as exc:
        raise LimitError(422, str(exc)) from None


def _loads(body: bytes | str) -> Any:
    """``json.loads`` with one-line 400s: malformed, or nested too deeply for the parser."""
    try:
        return json.loads(body)
    except RecursionError:
        raise LimitError(400, "malformed JSON body: nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise LimitError(400, f"malformed JSON body: {type(exc).__name__} at position {getattr(exc, 'pos', '?')}") from None


def decode_diagnose(
    chunks: list[bytes], ctype: str, encoding: str, max_log: int, fmt: str | None, hints: dict[str, str]
) -> tuple[bytes, dict[str, str], str, str | None]:
    """The log bytes, hints, format and language (None: not in the body) of a ``/v1/diagnose``
    body (in a worker thread, under the limits).

    ``chunks`` is consumed (emptied) so that the raw body is freed as soon as it is decoded."""
    codings = content_codings(encoding)
    body = decode_codings(chunks, codings, max_log)
    if ctype in ("application/gzip", "application/x-gzip") and (not codings or body[:2] == b"\x1f\x8b"):
        body = gunzip([body], max_log)  # a .gz file (sent as is, or with a Content-Encoding of its own)
    if ctype == "application/json":
        payload = _loads(body)
        del body
        try:
            req = DiagnoseRequest.model_validate(payload)
        except ValidationError as exc:
            raise RequestValidationError(exc.errors()) from None
        except RecursionError:
            raise LimitError(400, "malformed JSON body: nested too deeply") from None
        del payload
        data = req.log.encode("utf-8", "surrogatepass")
        return data, {**hints, **req.hints}, fmt or req.format, req.lang
    check_content_type(ctype)
    return body, hints, fmt or "json", None


def accept_language(header: str | None) -> str | None:
    """The first language of an ``Accept-Language`` header that oomdoctor speaks (None: none)."""
    from oomdoctor.i18n import normalize

    tags = []
    for i, part in enumerate((header or "").split(",")[:16]):
        tag, _sep, q = part.strip().partition(";q=")
        try:
            weight = float(q) if q else 1.0
        except ValueError:
            weight = 0.0
        if weight > 0:
            tags.append((-weight, i, tag))
    for _weight, _order, tag in sorted(tags):
        if (lang := normalize(tag)) is not None:
            return lang
    return None


def check_content_type(ctype: str) -> None:
    """415 for a body ``/v1/diagnose`` cannot read (checked before the body is read)."""
    if ctype == "application/json" or ctype.startswith("text/") or ctype in _RAW_TYPES or ctype == FORM_TYPE:
        return
    raise LimitError(415, f"unsupported content type {ctype!r}: send application/json, text/plain (or curl -d's form type) or application/gzip")


#: curl's default for ``-d @file``: the body is the file's text (as text/plain, not form-decoded)
FORM_TYPE = "application/x-www-form-urlencoded"
_RAW_TYPES = ("application/gzip", "application/x-gzip", "application/octet-stream", "")


def render(report: Report, fmt: str, *, response_type: str | None = None, max_chars: int | None = None) -> Response:
    """The HTTP response for ``report`` in ``fmt`` (secrets already redacted by the caller)."""
    headers = {"x-oomdoctor-errors": str(report.summary.errors), "x-oomdoctor-warnings": str(report.summary.warnings)}
    if fmt == "json":
        return Response(report.model_dump_json(), media_type="application/json", headers=headers)
    if fmt == "slack":
        from oomdoctor.render.slack import render_slack_blocks

        return JSONResponse(render_slack_blocks(report, response_type=response_type), headers=headers)
    if fmt == "markdown":
        from oomdoctor.render.markdown import render_markdown

        return Response(render_markdown(report, max_chars=max_chars), media_type="text/markdown; charset=utf-8", headers=headers)
    from oomdoctor.render.text import render_text

    return PlainTextResponse(render_text(report, color=False), headers=headers)


def _post_json(url: str, payload: dict[str, Any], headers: dict[str, str] | None = None, timeout: float = 10.0) -> int:
    data = json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, method="POST")
    req.add_header("Content-Type", "application/json; charset=utf-8")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # the caller checked the URL
        return int(resp.status)


def _allowed(url: str, prefixes: tuple[str, ...]) -> bool:
    return bool(url) and any(url.startswith(p) for p in prefixes)


def create_app(config: ServerConfig | None = None, pack: RulePack | None = None) -> FastAPI:
    cfg = config or ServerConfig.from_env()
    pack = pack or default_pack()
    analyser = Analyser(pack, cfg.max_concurrency, cfg.analysis_timeout, cfg.queue_timeout)
    replay = slack.ReplayCache(cfg.replay_window)
    seen_events = slack.ReplayCache(3600, max_entries=10_000)
    background: set[asyncio.Task[Any]] = set()
    budget = BodyBudget(cfg.body_budget)
    from oomdoctor.fleet import Fleet

    fleet = Fleet(cfg.fleet, pack)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> Any:
        fleet.start()
        try:
            yield
        finally:
            await asyncio.to_thread(fleet.stop)

    async def body_of(request: Request, *, verified: bool = False, limit: int | None = None) -> bytes:
        """A chat body: read under the same time limit and budget (the unverified share unless the
        headers carried the credentials), then given back."""
        chunks, taken = await read_body(request.stream(), budget, cfg.body_timeout, verified=verified, limit=limit)
        budget.give(taken, verified=verified)
        return b"".join(chunks)

    app = FastAPI(
        title="oomdoctor",
        version=__version__,
        description="Diagnose GPU out-of-memory failures in logs; answers with ranked remedies and exact flags.",
        # FastAPI's own interactive docs of /openapi.json (Swagger UI; its script and style come
        # from FastAPI's default CDN, so a browser without internet sees the bare page)
        docs_url="/docs",
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.config = cfg
    app.state.fleet = fleet
    app.state.analyser = analyser
    app.state.body_budget = budget
    bearer = HTTPBearer(auto_error=False, description="OOMDOCTOR_API_TOKEN, when the server has one")

    # -- errors: always {"error": "..."} ----------------------------------------------------------

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        msg = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        if exc.status_code == 404 and msg == "Not Found":
            msg = "not found (see /openapi.json for the endpoints)"
        elif exc.status_code == 405:
            msg = "method not allowed"
        return _error(exc.status_code, msg, dict(exc.headers or {}))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # never echo the input: it may be a log full of secrets; a location may hold the client's
        # own hint keys, redacted like any text oomdoctor echoes
        from oomdoctor.redaction import redact

        parts = []
        for e in exc.errors()[:5]:
            loc = ".".join(redact(str(x)) for x in e.get("loc", ()) if x != "body")
            parts.append(f"{loc or 'body'}: {e.get('msg', 'invalid')}")
        return _error(422, "invalid request: " + "; ".join(parts))

    @app.exception_handler(LimitError)
    async def _limit_error(_request: Request, exc: LimitError) -> JSONResponse:
        if exc.status == 422:  # may echo a hint the client sent
            from oomdoctor.redaction import redact

            return _error(exc.status, redact(exc.message), exc.headers)
        return _error(exc.status, exc.message, exc.headers)

    # -- auth ---------------------------------------------------------------------------------------

    async def require_token(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if not cfg.api_token:
            return
        import hmac

        if creds is None or creds.scheme.lower() != "bearer":
            raise StarletteHTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
        if not hmac.compare_digest(creds.credentials.encode(), cfg.api_token.encode()):
            raise StarletteHTTPException(401, "invalid bearer token", headers={"WWW-Authenticate": "Bearer"})

    # -- endpoints ----------------------------------------------------------------------------------

    @app.get("/healthz", response_model=Health, tags=["service"])
    async def healthz() -> Health:
        return Health(status="ok", version=__version__, rules=len(pack.rules))

    @app.get("/v1/rules", response_model=RulesResponse, dependencies=[Depends(require_token)], tags=["v1"],
             responses={401: {"model": ErrorBody}})
    async def rules() -> RulesResponse:
        return RulesResponse(
            rules=[
                RuleInfo(id=r.id, title=r.rule.title, kind=r.rule.kind, engine=r.rule.engine, severity=r.rule.severity)
                for r in pack.rules
            ]
        )

    diagnose_body = {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/DiagnoseRequest"}},
                "text/plain": {"schema": {"type": "string"}},
                "application/gzip": {"schema": {"type": "string", "format": "binary"}},
            },
        }
    }

    @app.post(
        "/v1/diagnose",
        dependencies=[Depends(require_token)],
        tags=["v1"],
        openapi_extra=diagnose_body,
        responses={
            200: {
                "description": "The report (format json), Block Kit (slack), Markdown or text.",
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/Report"}},
                    "text/markdown": {"schema": {"type": "string"}},
                    "text/plain": {"schema": {"type": "string"}},
                },
            },
            400: {"model": ErrorBody}, 401: {"model": ErrorBody}, 413: {"model": ErrorBody},
            415: {"model": ErrorBody}, 422: {"model": ErrorBody}, 503: {"model": ErrorBody},
        },
    )
    async def diagnose(
        request: Request,
        format: Format | None = Query(None, description="Output format for text/plain and gzip bodies."),
        hint: list[str] = Query([], description="KEY=VALUE facts for text/plain and gzip bodies."),
        lang: Lang | None = Query(
            None, description="Language of the human text: en or ja (a JSON body's lang wins; default: "
            "Accept-Language, then en)."
        ),
    ) -> Response:
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        encoding = request.headers.get("content-encoding", "").strip().lower()
        query_hints: dict[str, str] = {}
        for h in hint:
            k, eq, v = h.partition("=")
            if not eq:
                raise LimitError(422, f"hint must be KEY=VALUE, got {h[:40]!r}")
            query_hints[k] = v
        check_content_type(ctype)
        content_codings(encoding)  # 415 before the body is read
        chunks, taken = await read_body(request.stream(), budget, cfg.body_timeout)

        def work(deadline: Deadline) -> Response:
            data, hints, fmt, body_lang = decode_diagnose(chunks, ctype, encoding, cfg.max_log, format, query_hints)
            if len(data) > cfg.max_log:
                raise LimitError(413, f"log too large: the limit is {cfg.max_log} bytes")
            if not data.strip():
                raise LimitError(400, "empty log: send the log text as the body (curl --data-binary @server.log)")
            with use_lang(body_lang or lang or accept_language(request.headers.get("accept-language")) or "en"):
                report = analyser.report(data, _clean_hints(hints), deadline)
                del data
                return render(report, fmt)

        try:
            return await analyser.call(work)
        finally:
            chunks.clear()
            budget.give(taken)

    # -- fleet: log shippers' batches (a thin adapter over oomdoctor.fleet) ---------------------------

    ingest_body = {
        "requestBody": {
            "required": True,
            "content": {
                "application/x-ndjson": {"schema": {"type": "string"}},
                "application/json": {"schema": {"type": "array", "items": {"type": "object"}}},
                "text/plain": {"schema": {"type": "string"}},
            },
        }
    }

    @app.post(
        "/v1/ingest", dependencies=[Depends(require_token)], tags=["fleet"], openapi_extra=ingest_body,
        responses={400: {"model": ErrorBody}, 401: {"model": ErrorBody}, 413: {"model": ErrorBody},
                   415: {"model": ErrorBody}, 429: {"model": ErrorBody}},
    )
    async def ingest(
        request: Request,
        stream: str | None = Query(None, max_length=1024, description="text/plain: the stream key (required)."),
        node: str | None = Query(None, max_length=253, description="text/plain: the node label."),
        pod: str | None = Query(None, max_length=253, description="text/plain: the pod label."),
        container: str | None = Query(None, max_length=253, description="text/plain: the container label."),
    ) -> JSONResponse:
        from oomdoctor.fleet.records import RecordError, StreamId, group_runs, parse_records
        from oomdoctor.fleet.streams import Busy

        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        encoding = request.headers.get("content-encoding", "").strip().lower()
        is_json = ctype in ("application/json", "application/x-ndjson", "application/jsonlines", "application/json-seq")
        if not is_json and not ctype.startswith("text/"):
            raise LimitError(415, f"unsupported content type {ctype!r}: send application/x-ndjson, application/json or text/plain")
        if not is_json and not stream:
            raise LimitError(400, "a text/plain batch needs its stream key in the query: ?stream=KEY")
        codings = content_codings(encoding)
        chunks, taken = await read_body(request.stream(), budget, cfg.body_timeout)

        def work() -> tuple[int, int]:
            body = decode_codings(chunks, codings, cfg.max_log)
            chunks.clear()
            if is_json:
                times: list[float] = []
                try:
                    pairs = parse_records(body, cfg.fleet, times)
                except RecordError as exc:
                    raise LimitError(400, str(exc)) from None
                if fleet.metrics is not None and times:
                    fleet.metrics.observe_lag(times, time.time())
                batch = group_runs(pairs)
            else:
                parts = {"node": node or "", "pod": pod or "", "container": container or ""}
                # the bytes continue the stream as they are: a line cut between two batches is one line
                batch = [(StreamId.of(parts, key=stream), body)] if body else []
            return fleet.table.ingest(batch), len(batch)

        try:
            lines, streams = await asyncio.to_thread(work)
        except Busy as exc:
            raise LimitError(429, str(exc), {"Retry-After": str(exc.retry_after)}) from None
        finally:
            chunks.clear()
            budget.give(taken)
        return JSONResponse({"lines": lines, "streams": streams})

    @app.get("/v1/streams", dependencies=[Depends(require_token)], tags=["fleet"],
             responses={401: {"model": ErrorBody}})
    async def streams() -> JSONResponse:
        return JSONResponse({"streams": fleet.table.streams()})

    @app.get("/v1/streams/{key:path}/findings", dependencies=[Depends(require_token)], tags=["fleet"],
             responses={401: {"model": ErrorBody}, 404: {"model": ErrorBody}})
    async def stream_findings(key: str) -> JSONResponse:
        found = fleet.table.findings(key)
        if found is None:
            raise LimitError(404, "no such stream")
        return JSONResponse({"stream": key, "findings": found})

    @app.get("/metrics", tags=["service"], response_class=PlainTextResponse)
    async def metrics() -> Response:
        if fleet.metrics is None:
            raise LimitError(404, "metrics need prometheus_client: pip install 'oomdoctor[server]'")
        from oomdoctor.fleet.metrics import CONTENT_TYPE

        return Response(await asyncio.to_thread(fleet.metrics.exposition), media_type=CONTENT_TYPE)

    # -- chat ---------------------------------------------------------------------------------------

    def chat_text(message: str, **values: object) -> str:
        """A fixed chat message (marked with ``N_``) in the deployment's chat language."""
        with use_lang(cfg.chat_lang):
            return _(message).format(**values)

    def chat_answer(answer: Callable[[Report], dict[str, Any]], data: bytes, deadline: Deadline) -> dict[str, Any]:
        """The chat answer to ``data``, in the deployment's chat language (``OOMDOCTOR_CHAT_LANG``)."""
        with use_lang(cfg.chat_lang):
            return answer(analyser.report(data, {}, deadline))

    async def analyse_for_chat(
        data: bytes,
        response_url: str,
        prefixes: tuple[str, ...],
        answer: Callable[[Report], dict[str, Any]],
        fail: Callable[[str], dict[str, Any]],
        ack: dict[str, Any],
    ) -> dict[str, Any]:
        """Answer inline when the analysis is quick; otherwise ``ack`` now and POST to response_url."""

        async def result() -> dict[str, Any]:
            try:
                return await analyser.call(lambda deadline: chat_answer(answer, data, deadline))
            except LimitError as exc:
                return fail(exc.message)

        task = asyncio.ensure_future(result())
        can_defer = _allowed(response_url, prefixes)
        done, _pending = await asyncio.wait({task}, timeout=cfg.chat_inline_seconds if can_defer else None)
        if task in done:
            return task.result()

        async def deliver() -> None:
            payload = await task
            try:
                await asyncio.to_thread(_post_json, response_url, payload)
            except Exception as exc:  # the chat server is unreachable: nothing else to tell
                log.warning("could not deliver a deferred answer: %s", type(exc).__name__)

        t = asyncio.ensure_future(deliver())
        background.add(t)
        t.add_done_callback(background.discard)
        return ack

    def _form(body: bytes) -> dict[str, str]:
        try:
            pairs = urllib.parse.parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=200)
        except (UnicodeDecodeError, ValueError):
            raise LimitError(400, "malformed form body") from None
        return dict(pairs)

    slack_form = {
        "requestBody": {
            "required": True,
            "content": {
                "application/x-www-form-urlencoded": {
                    "schema": {
                        "type": "object",
                        "properties": {
                            "text": {"type": "string"},
                            "command": {"type": "string"},
                            "response_url": {"type": "string"},
                            "user_id": {"type": "string"},
                            "channel_id": {"type": "string"},
                            "token": {"type": "string"},
                        },
                    }
                }
            },
        }
    }

    def _slack_precheck(request: Request) -> None:
        """Before the body is read: Slack configured, signature headers present and fresh."""
        if not cfg.slack_signing_secret:
            raise LimitError(404, _SLACK_OFF, {"connection": "close"})
        try:
            slack.check_headers(dict(request.headers), window=cfg.replay_window)
        except slack.SignatureError as exc:
            raise LimitError(401, str(exc), {"connection": "close"}) from None

    def _slack_headers(request: Request, body: bytes) -> None:
        if not cfg.slack_signing_secret:
            raise LimitError(404, _SLACK_OFF)
        try:
            slack.verify(
                cfg.slack_signing_secret, dict(request.headers), body, replay, window=cfg.replay_window
            )
        except slack.SignatureError as exc:
            raise LimitError(401, str(exc)) from None

    @app.post("/slack/commands", tags=["chat"], openapi_extra=slack_form,
              responses={401: {"model": ErrorBody}, 404: {"model": ErrorBody}})
    async def slack_commands(
        request: Request,
        x_slack_signature: str | None = Header(None),
        x_slack_request_timestamp: str | None = Header(None),
    ) -> JSONResponse:
        if not cfg.slack_signing_secret:
            raise LimitError(404, _SLACK_OFF, {"connection": "close"})  # before a byte of the body is read
        if request.headers.get("x-slack-signature"):
            _slack_precheck(request)  # a stale or malformed request is refused before its body is read
            body = await body_of(request)
        else:  # unsigned: only Slack's small certificate probe is read, the rest refused unread
            declared = request.headers.get("content-length", "")
            if not declared.isdigit() or int(declared) > SSL_CHECK_MAX:
                raise LimitError(401, "missing X-Slack-Signature or X-Slack-Request-Timestamp header", {"connection": "close"})
            body = await body_of(request, limit=SSL_CHECK_MAX)
        if len(body) <= SSL_CHECK_MAX and b"ssl_check=1" in body and _form(body).get("ssl_check") == "1":
            # Slack's certificate probe (unsigned, as Bolt treats it): acknowledge and do nothing
            return JSONResponse({"ok": True})
        _slack_headers(request, body)  # on the raw body, before parsing
        form = await asyncio.to_thread(_form, body)
        text = form.get("text", "").strip()
        if not text or text.lower() in ("help", "-h", "--help"):
            return JSONResponse({"response_type": "ephemeral", "text": chat_text(slack.HELP)})
        data = slack.slack_text_to_log(text).encode("utf-8", "replace")
        lines = data.count(b"\n") + 1
        payload = await analyse_for_chat(
            data,
            form.get("response_url", ""),
            cfg.slack_response_prefixes,
            lambda r: _slack_answer(r, cfg.chat_response_type),
            lambda m: {"response_type": "ephemeral", "text": chat_text(N_("oomdoctor could not finish: {reason}"), reason=m)},
            {"response_type": "ephemeral",
             "text": chat_text(N_("oomdoctor is analysing {lines} line(s); the answer follows here."), lines=lines)},
        )
        return JSONResponse(payload)

    def _slack_answer(report: Report, response_type: str) -> dict[str, Any]:
        from oomdoctor.render.slack import render_slack_blocks

        return render_slack_blocks(report, response_type=response_type)

    @app.post("/slack/events", tags=["chat"], responses={401: {"model": ErrorBody}, 404: {"model": ErrorBody}})
    async def slack_events(
        request: Request,
        x_slack_signature: str | None = Header(None),
        x_slack_request_timestamp: str | None = Header(None),
    ) -> JSONResponse:
        _slack_precheck(request)
        body = await body_of(request)
        _slack_headers(request, body)
        payload = await asyncio.to_thread(_loads, body)
        if not isinstance(payload, dict):
            raise LimitError(400, "event body must be a JSON object")
        if payload.get("type") == "url_verification":
            return JSONResponse({"challenge": str(payload.get("challenge", ""))})
        event = payload.get("event")
        if payload.get("type") != "event_callback" or not isinstance(event, dict):
            return JSONResponse({"ok": True})
        event_id = str(payload.get("event_id", ""))
        if event_id and not seen_events.check_and_add(event_id, time.time()):
            return JSONResponse({"ok": True, "duplicate": True})  # a Slack retry of an event already handled
        if (
            event.get("type") not in ("message", "app_mention")
            or event.get("bot_id")
            or event.get("subtype") not in (None, "file_share")
        ):
            return JSONResponse({"ok": True})
        text = slack.event_log_text(event)
        if text.strip() and cfg.slack_bot_token:
            t = asyncio.ensure_future(_answer_event(event, text))
            background.add(t)
            t.add_done_callback(background.discard)
        return JSONResponse({"ok": True})

    async def _answer_event(event: dict[str, Any], text: str) -> None:
        try:
            with use_lang(cfg.chat_lang):  # the worker thread inherits the language (to_thread copies the context)
                report = await analyser.run(text.encode("utf-8", "replace"), {})
        except LimitError as exc:
            log.warning("event not analysed: %s", exc.message)
            return
        if not report.findings and event.get("type") != "app_mention":
            return  # stay quiet on ordinary messages that are not OOM logs
        from oomdoctor.render.slack import render_slack_blocks

        with use_lang(cfg.chat_lang):
            msg = render_slack_blocks(report)
        msg["channel"] = event.get("channel")
        msg["thread_ts"] = event.get("thread_ts") or event.get("ts")
        try:
            await asyncio.to_thread(
                _post_json,
                cfg.slack_api_url.rstrip("/") + "/chat.postMessage",
                msg,
                {"Authorization": f"Bearer {cfg.slack_bot_token}"},
            )
        except Exception as exc:
            log.warning("chat.postMessage failed: %s", type(exc).__name__)

    @app.post("/mattermost/commands", tags=["chat"], openapi_extra=slack_form,
              responses={401: {"model": ErrorBody}, 404: {"model": ErrorBody}})
    async def mattermost_commands(request: Request, authorization: str | None = Header(None)) -> JSONResponse:
        if not cfg.mattermost_token:
            raise LimitError(404, "Mattermost is not configured on this server (set OOMDOCTOR_MATTERMOST_TOKEN)",
                             {"connection": "close"})
        header_token = bool(authorization and authorization.strip().lower().startswith("token "))
        if header_token and not mm.token_ok(cfg.mattermost_token, authorization, None):
            # Mattermost's own header, wrong: refused before the body is read
            raise LimitError(401, "invalid or missing Mattermost token", {"connection": "close"})
        # a right header: the body is verified; a token only in the form: the unverified share
        body = await body_of(request, verified=header_token)
        form = await asyncio.to_thread(_form, body)
        if not mm.token_ok(cfg.mattermost_token, authorization, form.get("token")):
            raise LimitError(401, "invalid or missing Mattermost token")
        text = form.get("text", "").strip()
        if not text or text.lower() in ("help", "-h", "--help"):
            return JSONResponse(mm.answer(chat_text(slack.HELP), "ephemeral"))
        from oomdoctor.render.markdown import render_markdown

        payload = await analyse_for_chat(
            text.encode("utf-8", "replace"),
            form.get("response_url", ""),
            cfg.mattermost_response_prefixes,
            lambda r: mm.answer(render_markdown(r, max_chars=mm.MAX_POST), cfg.chat_response_type),
            lambda m: mm.answer(chat_text(N_("oomdoctor could not finish: {reason}"), reason=m), "ephemeral"),
            mm.answer(chat_text(N_("oomdoctor is analysing the log; the answer follows here.")), "ephemeral"),
        )
        return JSONResponse(payload)

    # -- OpenAPI: add the request/response models referenced by hand above -------------------------

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        comps = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in (DiagnoseRequest, Report):
            js = model.model_json_schema(ref_template="#/components/schemas/{model}")
            comps.update(js.pop("$defs", {}))
            comps[model.__name__] = js
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
    # the body limit wraps everything, so even a 404 path cannot be sent a huge body
    app.add_middleware(ErrorShieldMiddleware)
    app.add_middleware(BodyLimitMiddleware, max_body=cfg.max_body)
    app.add_middleware(AccessLogMiddleware)
    if fleet.metrics is not None:
        app.add_middleware(RequestMetricsMiddleware, counter=fleet.metrics.requests)
    return app


#: the paths whose requests are counted by name (any other path counts as "other": no label per URL)
_COUNTED_ROUTES = ("/v1/diagnose", "/v1/rules", "/v1/ingest", "/v1/streams", "/metrics", "/healthz",
                   "/slack/commands", "/slack/events", "/mattermost/commands")


class RequestMetricsMiddleware:
    """Counts every HTTP answer by route and status in the fleet's registry (``/metrics``)."""

    def __init__(self, app: Any, counter: Any) -> None:
        self.app = app
        self.counter = counter

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        route = next((r for r in _COUNTED_ROUTES if path == r or (r == "/v1/streams" and path.startswith(r + "/"))), "other")
        status = [0]

        async def counting_send(msg: Any) -> None:
            if msg["type"] == "http.response.start":
                status[0] = int(msg["status"])
            await send(msg)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            self.counter.labels(route=route, status=str(status[0] or 500)).inc()


def create_app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory`` and multi-worker mode (configuration from the environment)."""
    import os

    from oomdoctor.server.limits import settle_heap

    setup_logging(os.environ.get("OOMDOCTOR_LOG_LEVEL", "info"))
    app = create_app(ServerConfig.from_env())
    settle_heap()
    return app
