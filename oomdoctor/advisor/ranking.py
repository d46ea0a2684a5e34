"""The advisor's steps for one finding, and the ranking of its remedies (the advisor's entry
points, :func:`advise` and the others, are re-exported by :mod:`oomdoctor.advisor`; see its
docstring for the method)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import combinations
from typing import TYPE_CHECKING

from oomdoctor.advisor._engine_util import product_of
from oomdoctor.advisor.account import account_for
from oomdoctor.advisor.cause import engine_for, name_cause, outside_allocator
from oomdoctor.advisor.code_lines import is_words
from oomdoctor.advisor.prescription import planned_wording, prescribed, remedy_info, remedy_tradeoff, withheld
from oomdoctor.advisor.product_knobs import in_product_knobs
from oomdoctor.advisor.registry import AdviceInput, calculator
from oomdoctor.advisor.run_steps import look_outside_allocator
from oomdoctor.advisor.unsized import unsized_lever
from oomdoctor.advisor.versions import flag_exists
from oomdoctor.advisor.weight_tensors import loading_tensor
from oomdoctor.i18n import _, join_sentences
from oomdoctor.report import AccountEntry, Cause, Context, Finding, Remedy, Report
from oomdoctor.units import format_size

if TYPE_CHECKING:
    from oomdoctor.rulepack import RulePack

_CONFIDENCE = {"high": 0, "medium": 1, "low": 2}
_FITS = {True: 0, None: 1, False: 2}


def _cost(r: Remedy) -> int:
    if r.id.startswith("combined:"):
        return sum(remedy_info(x).cost for x in r.id[len("combined:") :].split("+"))
    if r.id == "vllm.cpu-offload-gb" and r.confidence == "low":
        return 20  # most of the weights over PCIe: worse than any model change
    if r.id == "torch.mps-high-watermark" and r.env.get("PYTORCH_MPS_HIGH_WATERMARK_RATIO") == "0.0":
        return 20  # no limit at all: PyTorch's message warns it "may cause system failure"
    return remedy_info(r.id).cost


#: from this cost up a remedy changes the model or the hardware (quantization, parallelism, CPU
#: offload, a smaller model): it comes after every cheaper one, unless the cause is the weights
EXPENSIVE_COST = 6
#: causes whose own remedies are the expensive ones: the weights themselves do not fit
_WEIGHT_CAUSES = ("weights-exceed-device", "placement")


def _parts(r: Remedy) -> list[str]:
    return r.id[len("combined:"):].split("+") if r.id.startswith("combined:") else [r.id]


def _tier(r: Remedy, own: frozenset[str] | set[str], cause: str | None) -> int:
    """0: the cause's own knob; 1: another cheap remedy (the rule's list); 2: an expensive one."""
    parts = _parts(r)
    if len(parts) > 1 and r.fits:
        return 0  # made only because nothing fits alone: the smallest set that does
    expensive = any(remedy_info(p).cost >= EXPENSIVE_COST for p in parts)
    if expensive and cause not in _WEIGHT_CAUSES:
        return 2
    return 0 if any(p in own for p in parts) else (2 if expensive else 1)


def _rank_key(r: Remedy, own: frozenset[str] | set[str] = frozenset(), cause: str | None = None,
              some_fit: bool = False) -> tuple[int, ...]:
    """The cause's own knob first, expensive changes last; within each, a last resort after the others
    (``last_resort``: the engine's own advice lists it last), then what fits, how sure, and cost.
    A remedy not enough alone comes after every other when some remedy fits (``some_fit``)."""
    last = any(remedy_info(p).last_resort for p in _parts(r))
    return (int(some_fit and r.fits is False), _tier(r, own, cause), int(last), _FITS[r.fits],
            _CONFIDENCE[r.confidence], _cost(r), r.rank)


#: a remedy whose saving is below this share of the shortfall is dropped (it changes nothing the
#: failure needs); between it and the shortfall it stays, "not enough alone", after what fits
NEGLIGIBLE_SAVING = 0.10


def _shortfall(inp: AdviceInput) -> int | None:
    """The bytes missing for the failing allocation, from the account (request − free, KV needed − available)."""
    acc = inp.finding.account
    short = acc.get("shortfall") if acc is not None else None
    return short if short and short > 0 else None


def _saves_too_little(rem: Remedy, rid: str, inp: AdviceInput, short: int | None = None) -> bool:
    """The remedy's saving, computed from the log, is below the shortfall (``short``, else read from
    the account) and its calculator did not judge the fit itself. A remedy that removes the failing
    allocation (no graphs to capture while the failure is capturing them) is not measured by its saving."""
    if short is None:
        short = _shortfall(inp)
    if short is None or rem.fits is not None or rem.saves_bytes is None or rem.saves_bytes >= short:
        return False
    cause = inp.finding.cause
    capturing = inp.finding.phase == "cudagraph-capture" or (cause is not None and cause.id == "cudagraph-capture")
    return not (remedy_info(rid).eliminates and capturing)


def _changes(r: Remedy) -> dict[str, str]:
    return {**r.flags, **r.env, **r.settings}


def _sized(r: Remedy) -> bool:
    """Whether ``r`` changes something to a value: a knob whose value is words because the log does
    not give it (a flag or variable in words, the table's ``knob`` of an unsized remedy) is not one."""
    knob = remedy_info(r.id).knob
    worded = {k for k, v in [*r.flags.items(), *r.env.items()] if is_words(v)}
    worded |= {k for k, v in r.settings.items() if k == knob and is_words(v)}
    return any(k not in worded for k in _changes(r))


def _combine(rems: Sequence[Remedy], missing: int, short_alone: frozenset[int] | set[int] = frozenset()) -> Remedy | None:
    """The smallest set (then cheapest) of compatible remedies whose savings cover ``missing`` bytes
    (``short_alone``: ids of remedies whose saving is below the shortfall, still parts of a set)."""
    pool = [r for r in rems if (r.fits is not False or id(r) in short_alone) and r.saves_bytes and r.saves_bytes > 0
            and _changes(r) and remedy_info(r.id).additive]
    if any((r.saves_bytes or 0) >= missing for r in pool):
        return None  # one change alone covers it: a combination would say otherwise
    for size in (2, 3):
        best: tuple[int, tuple[Remedy, ...]] | None = None
        for combo in combinations(pool, size):
            keys = [k for r in combo for k in _changes(r)]
            if len(keys) != len(set(keys)):
                continue  # two values for one flag
            levers = [remedy_info(r.id).lever or r.id for r in combo]
            if len(levers) != len(set(levers)):
                continue  # alternatives, not complements
            if sum(r.saves_bytes or 0 for r in combo) < missing:
                continue
            cost = sum(remedy_info(r.id).cost for r in combo)
            if best is None or cost < best[0]:
                best = (cost, combo)
        if best is not None:
            combo = best[1]
            total = sum(r.saves_bytes or 0 for r in combo)
            return Remedy(
                id="combined:" + "+".join(r.id for r in combo),
                title=_("Together: {titles}").format(titles=_("; ").join(r.title for r in combo)),
                flags={k: v for r in combo for k, v in r.flags.items()},
                env={k: v for r in combo for k, v in r.env.items()},
                saves_bytes=total,
                fits=True,
                confidence="low" if any(r.confidence == "low" for r in combo) else "medium",
                why=_("No single change covers the {missing} missing; together they save {total} ({parts}).").format(
                    missing=format_size(missing), total=format_size(total),
                    parts=", ".join(f"{format_size(r.saves_bytes or 0)}" for r in combo),
                ),
                tradeoff=join_sentences(r.tradeoff for r in combo if r.tradeoff),
                sources={k: v for r in combo for k, v in r.sources.items()},
            )
    return None


def _already_in_use(rem: Remedy, context: Context) -> bool:
    """True when every flag of ``rem`` is already set to the same value in this run."""
    if not rem.flags or rem.env or rem.settings:
        return False
    from oomdoctor.advisor.command import apply_flags

    args = context.launch_args
    for flag, value in rem.flags.items():
        key = flag[2:].replace("-", "_")
        cur = args.get(key)
        if context.command:
            if apply_flags(context.command, {flag: value}, context.engine_version) != list(context.command):
                return False
            continue
        if cur is None:
            return False
        if value == "" and cur not in ("True", "true"):
            return False
        if value != "" and str(cur).strip("'\"") != value:
            return False
    return True


#: inputs that only round a value (a block size), not numbers the value is computed from
_ROUNDING = {"block_size"}


def _stated(source: str) -> bool:
    """A number the log states (the message, a context line) or derives from stated numbers."""
    return source.startswith(("message", "context", "derived from the message"))


def _missing_flag(rem: Remedy, inp: AdviceInput) -> str | None:
    """The first flag or variable of ``rem`` that the detected engine version lacks, or None."""
    engine = engine_for(inp.finding, inp.context)
    version = inp.context.engine_version if inp.context.engine in (None, engine) else None
    for key, value in [*rem.flags.items(), *rem.env.items()]:
        probe = f"{key}={value}" if value else key
        if flag_exists(engine, probe, version) is False:
            return probe
    return None


def _command_exists(command: str, inp: AdviceInput) -> bool:
    """False when the command's program (``vllm serve``) is newer than the detected version."""
    words = [w for w in command.split() if "=" not in w or w.startswith("-")]
    if words[:2] != ["vllm", "serve"]:
        return True
    version = inp.context.engine_version if inp.context.engine in (None, "vllm") else None
    return flag_exists("vllm", "vllm serve", version) is not False


def _withholds(inp: AdviceInput, ids: Iterable[str]) -> bool:
    """True when the finding's cause withholds any of ``ids``."""
    cause = inp.finding.cause
    if cause is None:
        return False
    drop = withheld(cause.id, engine_for(inp.finding, inp.context), inp.finding.phase)
    return any(i in drop for i in ids)


def rank_remedies(ids: Iterable[str], inp: AdviceInput) -> list[Remedy]:
    """Compute the remedies ``ids`` for one input, drop duplicates, no-ops and flags the version lacks,
    rank and number them (worded for a plan when ``inp.planned``)."""
    with planned_wording(inp.planned):
        return _rank_remedies(ids, inp)


def _rank_remedies(ids: Iterable[str], inp: AdviceInput) -> list[Remedy]:
    ids = list(ids)
    out: list[Remedy] = []
    short_alone: set[int] = set()  # remedies found short by _saves_too_little: still parts of a combination
    shortfall = _shortfall(inp)
    seen: set[tuple[tuple[str, str], ...]] = set()
    for order, rid in enumerate(ids):
        rem = calculator(rid)(inp)
        if rem is None:
            continue
        if _missing_flag(rem, inp) is not None:
            continue
        rem.tradeoff = rem.tradeoff or remedy_tradeoff(rid)
        if rem.fits is True and inp.finding.account is not None and not inp.finding.account.entries \
                and not remedy_info(rid).eliminates:
            rem.fits = None  # "fits" only when the account shows it
        if rem.confidence == "high" and not all(_stated(v) for k, v in rem.sources.items() if k not in _ROUNDING):
            rem.confidence = "medium"  # "high" only when every number used is stated by the log
        if shortfall is not None and _saves_too_little(rem, rid, inp, shortfall):
            if (rem.saves_bytes or 0) < NEGLIGIBLE_SAVING * shortfall:
                continue  # a tenth of what is missing, or less: it changes nothing the failure needs
            rem.fits = False
            rem.why = join_sentences([rem.why, _("It saves {saves}, less than the {short} missing: not enough alone.").format(
                saves=format_size(rem.saves_bytes or 0), short=format_size(shortfall))])
            short_alone.add(id(rem))
        key = tuple(sorted(_changes(rem).items()))
        if key and key in seen:
            continue
        if _already_in_use(rem, inp.context):
            continue
        seen.add(key)
        rem.id = rid
        rem.rank = order
        out.append(rem)
    if out and not any(r.fits and r.confidence != "low" for r in out):
        from oomdoctor.advisor.remedies_vllm import plan_remedy, shortage, shortage_is_lower_bound

        combo = plan_remedy(inp)
        if combo is not None and _withholds(inp, combo.id[len("combined:"):].split("+")):
            combo = None  # the plan pulls a lever the cause says cannot change this budget
        short = shortage(inp)
        if combo is None and short and short[0] > 0 and not shortage_is_lower_bound(inp):
            combo = _combine(out, short[0], short_alone)
        if combo is not None:
            combo.rank = -1
            out.append(combo)
    cause = inp.finding.cause
    engine = engine_for(inp.finding, inp.context)
    prescription = [i for i in prescribed(cause.id, engine, inp.finding.phase) if i in ids] if cause else []
    own = set(prescription)
    if cause is not None and inp.finding.severity == "error" and not any(_tier(r, own, cause.id) == 0 for r in out):
        # none of the cause's own knobs could be sized: the first that can be named without a
        # value still leads (unsized.py), ahead of the generic remedies
        lever = unsized_lever(prescription, (r.id for r in out), engine)
        if lever is None and cause.id == "unknown" and not out:
            # no cause, and nothing the log sizes: the rule's own first knob worded for a log that
            # shows nothing at all (its ``title_bare``: llama.cpp/ollama's context) rather than nothing
            ollama = product_of(inp) == "ollama"  # ollama's own names, else llama.cpp's flags
            rule_own = [i for i in ids if not i.startswith("ggml." if ollama else "ollama.")]
            lever = unsized_lever(rule_own, (), engine, variant="bare")
        if lever is not None:
            lever.tradeoff = remedy_tradeoff(lever.id)
            out.append(lever)
    some_fit = any(r.fits is True for r in out)
    out.sort(key=lambda r: _rank_key(r, own, cause.id if cause else None, some_fit))
    # in the knobs of the product the user runs (keywords of a Python call); one it lacks is dropped
    out = [r for r in (in_product_knobs(rem, product_of(inp)) for rem in out) if r is not None]
    for i, rem in enumerate(out, 1):
        rem.rank = i
    _commands_and_code(out, inp)
    return out


def _commands_and_code(rems: list[Remedy], inp: AdviceInput) -> None:
    """Give every remedy its corrected launch command (where the command is known and the remedy's
    change is flags or environment variables; not one that is not enough alone) and its code lines."""
    from oomdoctor.advisor.code_lines import code_lines
    from oomdoctor.advisor.command import corrected_command

    known = bool(inp.context.command or inp.context.typed_args or inp.context.dump_args)
    for rem in rems:
        if known and rem.fits is not False and (rem.flags or rem.env):
            command = corrected_command(inp.context, rem)
            rem.command = command if command is None or _command_exists(command, inp) else None
        rem.code = code_lines(rem, product_of(inp), inp.finding.engine)


def diagnose_finding(finding: Finding, context: Context) -> Cause:
    """Fill ``finding.account`` and ``finding.cause`` (in place) and return the cause. A failure
    whose log shows no stage, whose request is one of the model's weight tensors to the byte
    (:mod:`~oomdoctor.advisor.weight_tensors`), is placed in weights-load, the tensor named in the
    account ("weight-tensor") and the cause's evidence."""
    finding.account = account_for(finding, context)
    if finding.phase in ("unknown", "weights-load"):
        tensor = loading_tensor(finding, context, finding.account, engine_for(finding, context))
        if tensor is not None:
            finding.phase = "weights-load"
            finding.account.entries.append(AccountEntry(
                name="weight-tensor", bytes=tensor.bytes, source="derived",
                note=f"one {tensor.name} weight of {context.model}: {tensor.formula()}, while the process held "
                     "less than the model's weights: they were loading",
            ))
    finding.cause = name_cause(finding, context, finding.account)
    return finding.cause


def prescription_ids(finding: Finding, context: Context, rule_ids: Iterable[str]) -> list[str]:
    """The remedies to compute: the cause's first, then the rule's, less those the cause withholds."""
    cause = finding.cause or diagnose_finding(finding, context)
    engine = engine_for(finding, context)
    first = prescribed(cause.id, engine, finding.phase)
    drop = withheld(cause.id, engine, finding.phase)
    ids = [*first, *(r for r in rule_ids if r not in first)]
    return [r for r in ids if r not in drop]


def _rule_remedies(rule_id: str, pack: RulePack | None) -> list[str]:
    """The remedy ids of the rule that produced a finding: from ``pack`` (the one that scanned),
    else the built-in pack, else the newest pack loaded from rule directories that has the rule
    (``--rules DIR``: its own rules are not in the built-in pack)."""
    from oomdoctor.rulepack import default_pack
    from oomdoctor.rulepack.loader import loaded_packs

    for candidate in ([pack] if pack is not None else [default_pack(), *loaded_packs()]):
        try:
            return list(candidate.rule(rule_id).rule.remedies)
        except KeyError:
            continue
    return []


def remedies_for(
    finding: Finding, context: Context, hints: Mapping[str, str] | None = None, pack: RulePack | None = None
) -> list[Remedy]:
    """Account, cause, then compute, rank and number the remedies of one finding (``pack``: the rule
    pack that produced it; see :func:`_rule_remedies` when it is not given)."""
    rule_ids = _rule_remedies(finding.rule, pack)
    diagnose_finding(finding, context)
    ids = prescription_ids(finding, context, rule_ids)
    inp = AdviceInput(finding, context, dict(hints or {}))
    ranked = rank_remedies(ids, inp)
    if finding.severity == "error" and not any(_sized(r) or r.run or r.id.startswith("ask.") for r in ranked):
        # no error goes unanswered: where the log sizes no remedy, ask for the facts that would
        # (after the knob named without a value, when there is one)
        asks = rank_remedies(["ask.launch-facts"], inp)
        for i, ask in enumerate(asks, len(ranked) + 1):
            ask.rank = i
        ranked = [*ranked, *asks]
    _look_outside_first(ranked, finding)
    return ranked


def _look_outside_first(ranked: list[Remedy], finding: Finding) -> None:
    """Where much of the card is outside PyTorch's allocator (cause.outside_allocator), the first
    remedy starts by looking at who holds it: cutting a budget cannot win back another's memory."""
    if not ranked or finding.severity != "error":
        return
    if outside_allocator(finding, finding.cause.id if finding.cause else None) is None:
        return
    first = ranked[0]
    if any("-smi" in step.command for step in first.run):
        return  # it looks already (the other processes' remedy, an ask)
    first.run = [look_outside_allocator(rocm=finding.kind.startswith("torch.hip")), *first.run]


def advise_findings(
    findings: Iterable[Finding], context: Context, hints: Mapping[str, str] | None = None,
    pack: RulePack | None = None,
) -> None:
    """Fill ``remedies`` of each finding in place."""
    for f in findings:
        f.remedies = remedies_for(f, context, hints, pack)


def advise(report: Report, hints: Mapping[str, str] | None = None, pack: RulePack | None = None) -> Report:
    """Fill the remedies of every finding of ``report`` (in place) and return it."""
    advise_findings(report.findings, report.context, hints, pack)
    return report
