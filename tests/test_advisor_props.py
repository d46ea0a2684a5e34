"""Property tests: recommended values are monotone in the figures and never repeat what is in use."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from oomdoctor.advisor import rank_remedies
from oomdoctor.advisor.catalog import find_gpu, find_model, models
from oomdoctor.advisor.fit import KV_IDS, fit
from oomdoctor.advisor.memory_model import GiB, capacity_from_figures, capacity_tokens
from oomdoctor.advisor.registry import AdviceInput, calculator
from oomdoctor.report import Context, Finding, Location

MiB = 2**20
lengths = st.integers(min_value=1024, max_value=1 << 20)
sizes = st.integers(min_value=64 * MiB, max_value=200 * GiB)


def v1(max_len: int, needed: int, avail: int) -> Finding:
    return Finding(rule="t", kind="vllm.kv-cache.max-len-exceeds", engine="vllm", severity="error",
                   phase="kv-cache-alloc", title="t", message="m", location=Location(line=1, end_line=1),
                   figures={"max_seq_len": max_len, "kv_cache_needed_bytes": needed, "kv_cache_available_bytes": avail})


def max_len_value(f: Finding, ctx: Context | None = None) -> int | None:
    r = calculator("vllm.max-model-len")(AdviceInput(f, ctx or Context(engine="vllm")))
    return int(r.flags["--max-model-len"]) if r else None


@settings(max_examples=200, deadline=None)
@given(lengths, sizes, sizes, st.integers(min_value=0, max_value=50 * GiB))
def test_more_available_memory_never_shortens_max_model_len(max_len: int, needed: int, avail: int, more: int) -> None:
    a = capacity_from_figures(needed, avail, max_len)
    b = capacity_from_figures(needed, avail + more, max_len)
    assert b >= a
    va, vb = max_len_value(v1(max_len, needed, avail)), max_len_value(v1(max_len, needed, avail + more))
    if va is not None and vb is not None:
        assert vb >= va
    if va is not None:
        assert va < max_len and va % 16 == 0
        assert va * needed / (-(-max_len // 16) * 16) <= avail  # never more than the available bytes hold


@settings(max_examples=200, deadline=None)
@given(lengths, sizes, sizes, st.integers(min_value=0, max_value=50 * GiB))
def test_more_needed_memory_never_lengthens_max_model_len(max_len: int, needed: int, avail: int, more: int) -> None:
    assert capacity_from_figures(needed + more, avail, max_len) <= capacity_from_figures(needed, avail, max_len)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(models()), st.integers(min_value=0, max_value=100 * GiB), st.integers(min_value=0, max_value=10 * GiB))
def test_capacity_monotone_in_budget(geo: object, budget: int, more: int) -> None:
    assert capacity_tokens(geo, budget + more, 2, limit=1 << 20) >= capacity_tokens(geo, budget, 2, limit=1 << 20)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-8B", "google/gemma-2-9b-it", "Qwen/Qwen3-8B"]),
       st.integers(min_value=16, max_value=96), st.integers(min_value=0, max_value=64))
def test_fit_more_gpu_memory_never_shrinks_capacity(model: str, gib: int, more: int) -> None:
    geo = find_model(model)
    assert geo is not None
    a = fit(geo, None, total_bytes=gib * GiB, max_model_len=131072)
    b = fit(geo, None, total_bytes=(gib + more) * GiB, max_model_len=131072)
    assert b.capacity_tokens >= a.capacity_tokens
    assert b.fits or not a.fits


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=80 * GiB), st.integers(min_value=0, max_value=10 * GiB),
       st.floats(min_value=0.5, max_value=0.99))
def test_fit_free_utilization_monotone_and_bounded(free: int, more: int, util: float) -> None:
    total = 80 * GiB

    def value(fr: int) -> float | None:
        f = Finding(rule="t", kind="vllm.startup.free-memory-below-target", engine="vllm", severity="error",
                    phase="startup-check", title="t", message="m", location=Location(line=1, end_line=1),
                    figures={"free_bytes": fr, "total_bytes": total, "gpu_memory_utilization": util})
        r = calculator("vllm.gpu-memory-utilization.fit-free")(AdviceInput(f, Context(engine="vllm")))
        return float(r.flags["--gpu-memory-utilization"]) if r else None

    a, b = value(free), value(min(total, free + more))
    if a is not None:
        assert a <= free / total and a <= 0.95 and a < util
        if b is not None:
            assert b >= a


@settings(max_examples=100, deadline=None)
@given(lengths, sizes, sizes, st.sampled_from([None, "A10G", "L4", "T4", "H100"]))
def test_no_remedy_repeats_a_flag_value_already_in_use(max_len: int, needed: int, avail: int, gpu: str | None) -> None:
    f = v1(max_len, needed, avail)
    hints = {"gpu": gpu} if gpu else {}
    ctx = Context(engine="vllm", gpu_total_bytes=80 * GiB, gpu_memory_utilization=0.9)
    first = rank_remedies(KV_IDS, AdviceInput(f, ctx, hints))
    for rem in first:
        if not rem.flags or "--enforce-eager" in rem.flags:
            continue
        # run again with this remedy's flags already on the command line
        argv = ["vllm", "serve", "m"] + [x for k, v in rem.flags.items() for x in ([k, v] if v else [k])]
        ctx2 = ctx.model_copy(update={"command": argv})
        again = rank_remedies(KV_IDS, AdviceInput(f, ctx2, hints))
        for r in again:
            assert r.flags != rem.flags, (rem.id, r.id)


def test_gpu_catalog_fp8_flags() -> None:
    t4, l4 = find_gpu("T4"), find_gpu("L4")
    assert t4 is not None and l4 is not None
    assert not t4.fp8_tensor_cores and l4.fp8_tensor_cores


# -- no remedy contradicts the account (issue 13), over every fixture ----------------------------------

def _fixture_findings() -> list[tuple[str, object, object]]:
    from tests.corpus import FIXTURES, fixture_report

    out = []
    for path in sorted(FIXTURES.glob("*/*.log")):
        report = fixture_report(path)
        out += [(f"{path.parent.name}/{path.name}", f, report.context) for f in report.findings if f.cause]
    return out


FIXTURE_FINDINGS = _fixture_findings()


def test_every_fixture_finding_has_a_cause_and_an_account() -> None:
    assert len(FIXTURE_FINDINGS) > 50
    from oomdoctor.advisor.prescription import CAUSES

    assert all(f.cause.id in CAUSES and f.account is not None for _, f, _ in FIXTURE_FINDINGS)  # type: ignore[attr-defined]


def test_no_remedy_contradicts_the_account() -> None:
    from oomdoctor.advisor.cause import engine_for
    from oomdoctor.advisor.prescription import remedy_info, withheld
    from oomdoctor.advisor.versions import flag_exists

    problems = []
    for name, f, ctx in FIXTURE_FINDINGS:
        acc, engine = f.account, engine_for(f, ctx)  # type: ignore[attr-defined,arg-type]
        drop = withheld(f.cause.id, engine, f.phase)  # type: ignore[attr-defined]
        version = ctx.engine_version if ctx.engine in (None, engine) else None  # type: ignore[attr-defined]
        for r in f.remedies:  # type: ignore[attr-defined]
            where = f"{name}: {f.cause.id}: {r.id}"  # type: ignore[attr-defined]
            # a knob that does not govern the failing budget
            parts = r.id[len("combined:"):].split("+") if r.id.startswith("combined:") else [r.id]
            if any(p in drop for p in parts):
                problems.append(f"{where}: withheld by the cause")
            # a flag the detected (or current) version lacks
            for k, v in [*r.flags.items(), *r.env.items()]:
                if flag_exists(engine, f"{k}={v}" if v else k, version) is False:
                    problems.append(f"{where}: {k} {v} not in {engine} {version or '(current)'}")
            # a utilization whose budget cannot even hold the weights this process loads
            util = r.flags.get("--gpu-memory-utilization")
            cap, weights = acc.get("capacity"), acc.get("weights")
            if util and cap and weights and r.fits is not False and float(util) * cap < weights:
                problems.append(f"{where}: {util} × {cap} < weights {weights}")
            # "fits" with nothing in the account to show it (unless the failing allocation goes away)
            if r.fits is True and not acc.entries and not remedy_info(r.id).eliminates:
                problems.append(f"{where}: fits with an empty account")
            short = acc.get("shortfall")
            if r.fits is True and short and r.saves_bytes is not None and 0 < r.saves_bytes < short \
                    and not r.id.startswith("combined:") \
                    and not (r.flags.get("--max-model-len") or r.flags.get("--max_model_len")):
                problems.append(f"{where}: fits, yet saves {r.saves_bytes} < shortfall {short}")
    assert not problems, "\n".join(problems)


#: knobs one number sets, with the remedy ids that move it down and up
_FRACTION_KNOBS = {
    "--gpu-memory-utilization": (("vllm.gpu-memory-utilization.lower",),
                                 ("vllm.gpu-memory-utilization.raise", "vllm.gpu-memory-utilization.raise-for-kv")),
    "--mem-fraction-static": (("sglang.mem-fraction-static.lower",), ("sglang.mem-fraction-static.raise",)),
}


def test_no_cause_both_lowers_and_raises_one_knob() -> None:
    """A cause that lowers a fraction in an engine and phase withholds raising it there (every phase, not only fixtures')."""
    from oomdoctor.advisor.prescription import cause_table, prescribed, withheld
    from oomdoctor.advisor.registry import remedy_ids
    from oomdoctor.report import PHASES

    known = set(remedy_ids())
    problems = []
    for cause in cause_table():
        for engine in ("vllm", "sglang", "tgi", None):
            for phase in PHASES:
                offered, drop = set(prescribed(cause, engine, phase)), withheld(cause, engine, phase)
                for knob, (down, up) in _FRACTION_KNOBS.items():
                    if offered & set(down):
                        problems += [f"{cause}/{engine}/{phase}: {knob}: lowers, does not withhold {u}"
                                     for u in up if u in known and u not in drop]
    assert not problems, "\n".join(problems)


def test_no_report_both_lowers_and_raises_one_knob() -> None:
    """Within one finding every remedy moves a fraction the same way from the value in use."""
    problems = []
    for name, f, ctx in FIXTURE_FINDINGS:
        for knob, (down, up) in _FRACTION_KNOBS.items():
            ids = {r.id for r in f.remedies if knob in r.flags}  # type: ignore[attr-defined]
            if ids & set(down) and ids & set(up):
                problems.append(f"{name}: {knob}: {sorted(ids)}")
            now = ctx.gpu_memory_utilization if knob == "--gpu-memory-utilization" else None  # type: ignore[attr-defined]
            values = {float(r.flags[knob]) for r in f.remedies if knob in r.flags}  # type: ignore[attr-defined]
            if now is not None and any(v < now for v in values) and any(v > now for v in values):
                problems.append(f"{name}: {knob}: {sorted(values)} around {now}")
    assert not problems, "\n".join(problems)
