"""Load, validate and compile rule files.

Errors name the file, the rule and the field, e.g.
``rules/vllm.toml: rule "vllm.v1.kv-insufficient": match[2].figures.kv_cache_tokens: 'x' is not of type 'integer'``.
"""

from __future__ import annotations

import hashlib
import json
import re
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, cast

import regex

from oomdoctor import cache, regex_cache
from oomdoctor.advisor.registry import remedy_ids
from oomdoctor.paths import builtin_rules_dir
from oomdoctor.rulepack.model import (
    ContextRule,
    MatchExample,
    NoMatchExample,
    PhaseOrigin,
    PhaseRule,
    Product,
    Rule,
    RuleFile,
)

#: Seconds one regex search may take before the rule is reported as pathological.
REGEX_TIMEOUT = 0.25


class RulePackError(Exception):
    """A rule file is unreadable or invalid; the message names file, rule and field."""


@dataclass(slots=True)
class CompiledRule:
    rule: Rule
    source: str
    pattern: regex.Pattern[str]
    extract: dict[str, regex.Pattern[str]]
    extract_all: dict[str, regex.Pattern[str]]
    triggers: tuple[str, ...]
    order: int = 0
    #: from the built-in pack (tested by the suite); a user's rule is dropped, not fatal, when its
    #: regex times out (see :mod:`oomdoctor.scan.matching`)
    builtin: bool = False

    @property
    def id(self) -> str:
        return self.rule.id


#: a named group in a pattern (``regex`` syntax, ``(?P<name>`` or ``(?<name>``)
_NAMED_GROUP = re.compile(r"\(\?P?<[A-Za-z_]")


#: named groups whose reading depends on the lines before it or counts each line: a periodic
#: context rule (read only at its latest line) may not have them
ORDERED_GROUPS = frozenset({"args", "engine", "engine_version", "oom_recovered", "oom_retried", "k8s_block", "k8s_memory_bytes"})

_GROUP_NAME = re.compile(r"\(\?P?<([A-Za-z_]\w*)>")


def group_names(pattern: str) -> list[str]:
    """The named groups of a pattern (its source), told from the text."""
    return _GROUP_NAME.findall(pattern)


def reads_a_fact(pattern: str) -> bool:
    """Whether a context rule's ``pattern`` (its source) reads something (a named group), rather
    than only voting for the rule's engine; told from the text, without compiling it."""
    return _NAMED_GROUP.search(pattern) is not None


@dataclass(slots=True)
class CompiledContext:
    rule: ContextRule
    source: str
    pattern: regex.Pattern[str]
    triggers: tuple[str, ...]

    @property
    def votes_only(self) -> bool:
        """It reads nothing: a line it matches only votes for its engine."""
        return not reads_a_fact(self.rule.pattern)


#: the order phases are asked in (their tables merged, see :meth:`CompiledPhase.merged`): the more
#: specific stage first, since its functions run inside the others' (a capture runs a dummy
#: forward, a warm-up function wraps the capture, a trainer generates); any other phase after them
PHASE_PRIORITY = (
    "cudagraph-capture", "warmup", "kv-cache-alloc", "profiling", "weights-load", "startup-check", "training",
    "inference",
)


@dataclass(slots=True)
class CompiledPhase:
    rule: PhaseRule
    frames: frozenset[str]
    paths: tuple[str, ...]
    markers: tuple[regex.Pattern[str], ...]
    progress: tuple[regex.Pattern[str], ...]
    triggers: tuple[str, ...]
    #: frames named with their file ("PIECE::NAME" in ``frames``): (path piece, function name)
    file_frames: tuple[tuple[str, str], ...] = ()
    processes: frozenset[str] = frozenset()
    #: frames that count only in a log of one engine (``engine_frames``): (engine, path piece, name)
    engine_frames: tuple[tuple[str, str, str], ...] = ()

    def merged(self, other: CompiledPhase) -> CompiledPhase:
        """This phase's evidence and ``other``'s (of the same phase), this one's first."""
        def union(a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
            return tuple(dict.fromkeys((*a, *b)))

        return CompiledPhase(
            self.rule, self.frames | other.frames, union(self.paths, other.paths),
            union(self.markers, other.markers), union(self.progress, other.progress),
            union(self.triggers, other.triggers), union(self.file_frames, other.file_frames),
            self.processes | other.processes, union(self.engine_frames, other.engine_frames),
        )


@dataclass
class RulePack:
    """Every rule, context rule and phase rule, compiled and ready for the scanner."""

    rules: list[CompiledRule] = field(default_factory=list)
    contexts: list[CompiledContext] = field(default_factory=list)
    phases: list[CompiledPhase] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    #: product id -> its definition (rules/products.toml; a later file's entry overrides)
    products: dict[str, Product] = field(default_factory=dict)
    #: what loading the user's rule files had to say (a rule dropped, a built-in rule replaced)
    warnings: list[str] = field(default_factory=list)
    #: told a one-line warning when a user's rule is dropped during a scan (None: Python's warnings)
    warn: Callable[[str], None] | None = None

    def say(self, message: str) -> None:
        """One warning about the pack, to :attr:`warn` (or Python's warnings)."""
        if self.warn is not None:
            self.warn(message)
        else:
            import warnings

            warnings.warn(message, RuntimeWarning, stacklevel=2)

    def rule(self, rule_id: str) -> CompiledRule:
        for r in self.rules:
            if r.id == rule_id:
                return r
        raise KeyError(rule_id)

    def all_triggers(self) -> list[str]:
        """Every literal the prefilter must find (lower-cased, deduplicated)."""
        seen: dict[str, None] = {}
        for r in self.rules:
            seen.update(dict.fromkeys(r.triggers))
        for c in self.contexts:
            seen.update(dict.fromkeys(c.triggers))
        for p in self.phases:
            seen.update(dict.fromkeys(p.triggers))
        return list(seen)


@lru_cache(maxsize=1)
def _schema() -> dict[str, Any]:
    path = builtin_rules_dir() / "schema.json"
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return RuleFile.model_json_schema()


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _field_path(parts: Sequence[Any]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


#: Bump when the layout of the parsed-rules cache changes.
CACHE_FORMAT = 4


@lru_cache(maxsize=1)
def _code_key() -> str | None:
    """What a cached rule file depends on besides its own bytes: cache format, oomdoctor version,
    the JSON Schema and the models (a changed default or type must not reuse old entries); None
    when one of those sources cannot be read (nothing is cached then)."""
    return cache.source_key(
        f"rules {CACHE_FORMAT}", (builtin_rules_dir() / "schema.json", Path(__file__).with_name("model.py"))
    )


def _digest(raw: bytes) -> str | None:
    """The cache key of a rule file's bytes (None: no caching)."""
    key = _code_key()
    return None if key is None else hashlib.sha256(key.encode() + b"\0" + raw).hexdigest()[:40]


def _cached(raw: bytes) -> RuleFile | None:
    """The rule file parsed and validated before from these exact bytes, or None.

    The entry holds the validated models as JSON (see :func:`_freeze`); they are rebuilt with
    ``model_construct``, which skips validation only because these bytes passed it. A missing,
    corrupt or foreign entry is ignored: the caller parses and validates the file again.
    """
    key = _digest(raw)
    data = cache.load("rules", key) if key else None
    if data is None:
        return None
    try:
        return cast(RuleFile, _thaw(RuleFile, data))
    except Exception:  # well-formed JSON of an unexpected shape: never trust it
        return None


def _remember(raw: bytes, rf: RuleFile) -> None:
    key = _digest(raw)
    if key:
        cache.store("rules", key, _freeze(rf))


#: The nested models of a rule file: field -> model class, per class.
_NESTED: dict[str, dict[str, Any]] = {
    "RuleFile": {"rule": Rule, "context": ContextRule, "product": Product, "phase": PhaseRule},
    "Rule": {"match": MatchExample, "no_match": NoMatchExample},
    "PhaseRule": {"origins": PhaseOrigin},
}


def _freeze(model: Any) -> dict[str, Any]:
    """A model as ``{"v": every field, "s": the fields set}``, nested models frozen too."""
    nested = _NESTED.get(type(model).__name__, {})
    values = {
        name: [_freeze(m) for m in getattr(model, name)] if name in nested else getattr(model, name)
        for name in type(model).model_fields
    }
    return {"v": values, "s": sorted(model.model_fields_set)}


def _thaw(cls: Any, frozen: Any) -> Any:
    """The inverse of :func:`_freeze`. Every field is given, so ``model_construct`` calls no
    default factory (pydantic inspects each factory's signature, which is slow)."""
    values, fields_set = frozen["v"], frozen["s"]
    if not isinstance(values, dict) or set(values) != set(cls.model_fields) or not set(fields_set) <= set(values):
        raise TypeError(f"cache entry: not a {cls.__name__}")
    for name, sub in _NESTED.get(cls.__name__, {}).items():
        if not isinstance(values[name], list):
            raise TypeError(f"cache entry: {cls.__name__}.{name} is not a list")
        values[name] = [_thaw(sub, item) for item in values[name]]
    return cls.model_construct(_fields_set=set(fields_set), **values)


def _validate_schema(data: dict[str, Any], where: str) -> RuleFile:
    import jsonschema

    validator = jsonschema.Draft202012Validator(_schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        err = errors[0]
        path = list(err.absolute_path)
        who = ""
        if len(path) >= 2 and path[0] in ("rule", "context") and isinstance(path[1], int):
            items = data.get(path[0], [])
            ident = items[path[1]].get("id") if isinstance(items[path[1]], dict) else None
            who = f'{path[0]} "{ident}": ' if ident else f"{path[0]}[{path[1]}]: "
            path = path[2:]
        elif len(path) >= 2 and path[0] == "phase" and isinstance(path[1], int):
            who = f"phase[{path[1]}]: "
            path = path[2:]
        field_name = _field_path(path) or "(file)"
        raise RulePackError(f"{where}: {who}{field_name}: {err.message}")
    return RuleFile.model_validate(data)


_META = frozenset("\\.^$*+?{}[]|()")
_INLINE_FLAGS = re.compile(r"\(\?[a-zA-Z^\-](?<!\(\?P)")


def _alternation_at_top(pattern: str) -> bool:
    depth, i, n = 0, 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":  # a set: skip to its end ("]" first, or after "^", is literal)
            i += 1
            if i < n and pattern[i] == "^":
                i += 1
            if i < n and pattern[i] == "]":
                i += 1
            while i < n and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth <= 0:
            return True
        i += 1
    return False


def required_prefix(pattern: str) -> str:
    """A literal that every match of ``pattern`` (VERSION0, no flags) starts with, or "".

    The characters before the first metacharacter, less the last one when a quantifier may
    repeat it zero times; "" when the pattern has inline flags (case-insensitive, verbose...)
    or an alternation outside any group, which could match without the prefix.
    """
    if _INLINE_FLAGS.search(pattern) or ("|" in pattern and _alternation_at_top(pattern)):
        return ""
    out: list[str] = []
    for c in pattern:
        if c in _META:
            if c in "*?{" and out:
                out.pop()
            break
        out.append(c)
    return "".join(out)


_UNSET = object()


class LazyPattern:
    """A regex compiled on its first use.

    The built-in pack is compiled and tested by the test suite; most of its rules never meet a
    candidate line in a given log, and compiling all of them up front costs more than the whole
    analysis of a small log. User packs are compiled eagerly so that errors name the rule at load.
    ``search`` and ``finditer`` over a whole text that lacks the pattern's literal prefix (see
    :func:`required_prefix`) answer without compiling at all.
    """

    __slots__ = ("_compiled", "_prefix", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._compiled: regex.Pattern[str] | None = None
        self._prefix: Any = _UNSET

    def compiled(self) -> regex.Pattern[str]:
        if self._compiled is None:
            self._compiled = regex_cache.compile(self.pattern, regex.VERSION0)
        return self._compiled

    def _absent(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """True when the whole of ``args[0]`` is searched and cannot hold a match."""
        if self._compiled is not None or len(args) != 1 or not isinstance(args[0], str) or set(kwargs) - {"timeout"}:
            return False
        if self._prefix is _UNSET:
            self._prefix = required_prefix(self.pattern) or None
        return self._prefix is not None and self._prefix not in args[0]

    def search(self, *args: Any, **kwargs: Any) -> Any:
        if self._absent(args, kwargs):
            return None
        return self.compiled().search(*args, **kwargs)

    def match(self, *args: Any, **kwargs: Any) -> Any:
        return self.compiled().match(*args, **kwargs)

    def finditer(self, *args: Any, **kwargs: Any) -> Any:
        if self._absent(args, kwargs):
            return iter(())
        return self.compiled().finditer(*args, **kwargs)

    def fullmatch(self, *args: Any, **kwargs: Any) -> Any:
        return self.compiled().fullmatch(*args, **kwargs)

    @property
    def groupindex(self) -> Any:
        return self.compiled().groupindex


#: user rules (all rule directories together) at most: 20 000 took 15 s and 294 MiB to load
MAX_USER_RULES = 2000
#: a user pattern must finish each probe within this many seconds (an exponential pattern takes
#: years on a probe; a linear one microseconds)
PROBE_TIMEOUT = 0.1
PROBE_LENGTH = 256


class CatastrophicPattern(Exception):
    """A user's pattern timed out on a crafted probe."""


def _probes(pattern: str, triggers: Sequence[str]) -> list[str]:
    """Inputs that make a backtracking pattern blow up: runs of each character the pattern names
    (and of a few common ones), behind nothing or a trigger, ending in a character that fails."""
    chars = sorted({c for c in pattern if c.isalnum()} | set("a0 .-:"))[:24]
    heads = ["", *[t + sep for t in triggers[:2] if t for sep in ("", " ")]]
    out = []
    for head in heads:
        for c in chars:
            out.append(head + c * PROBE_LENGTH + "\x00")
        out.append(head + "a " * (PROBE_LENGTH // 2) + "\x00")
        out.append(head + "a0" * (PROBE_LENGTH // 2) + "\x00")
    return out


def check_pattern(compiled: regex.Pattern[str], triggers: Sequence[str], who: str, what: str) -> None:
    """:class:`CatastrophicPattern` when ``compiled`` times out on one of its probes."""
    for probe in _probes(compiled.pattern, triggers):
        try:
            compiled.search(probe, timeout=PROBE_TIMEOUT)
        except TimeoutError:
            raise CatastrophicPattern(
                f"{who}: {what}: regex timed out on a probe of {len(probe)} characters (catastrophic "
                "backtracking?): rule not loaded"
            ) from None


def _compile(pattern: str, where: str, what: str, lazy: bool = False) -> regex.Pattern[str]:
    if lazy:
        return cast("regex.Pattern[str]", LazyPattern(pattern))
    try:
        return regex.compile(pattern, regex.VERSION0)
    except regex.error as exc:
        pos = f" at position {exc.pos}" if exc.pos is not None else ""
        raise RulePackError(f"{where}: {what}: regex does not compile{pos}: {exc.msg}") from None


def read_rule_file(path: Path) -> RuleFile:
    """Parse and validate one TOML rule file."""
    where = _display(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RulePackError(f"{where}: cannot read: {exc.strerror or exc}") from None
    cached = _cached(raw)
    if cached is not None:
        return cached
    tomllib = cache.toml_module()
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise RulePackError(f"{where}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        line = getattr(exc, "lineno", None)
        col = getattr(exc, "colno", None)
        if line is None:
            m = regex.search(r"\(at line (\d+), column (\d+)\)", msg)
            if m:
                line, col = int(m.group(1)), int(m.group(2))
                msg = msg[: m.start()].strip()
        else:
            msg = getattr(exc, "msg", msg)
        loc = f":{line}:{col}" if line is not None else ""
        raise RulePackError(f"{where}{loc}: TOML syntax error: {msg}") from None
    except RecursionError:
        raise RulePackError(f"{where}: nested too deeply to be a rule file") from None
    try:
        rf = _validate_schema(data, where)
    except RecursionError:
        raise RulePackError(f"{where}: nested too deeply to be a rule file") from None
    _remember(raw, rf)
    return rf


def _compile_rule(
    rule: Rule, where: str, known_remedies: set[str] | None, lazy: bool = False
) -> CompiledRule:
    who = f'{where}: rule "{rule.id}"'
    pattern = _compile(rule.pattern, who, "pattern", lazy)
    extract = {k: _compile(v, who, f"extract.{k}", lazy) for k, v in rule.extract.items()}
    extract_all = {k: _compile(v, who, f"extract_all.{k}", lazy) for k, v in rule.extract_all.items()}
    if known_remedies is not None:
        for rid in rule.remedies:
            if rid not in known_remedies:
                raise RulePackError(f"{who}: remedies: unknown remedy id {rid!r}")
    triggers = tuple(t.lower() for t in rule.triggers if t.strip())
    if not triggers:
        raise RulePackError(f"{who}: triggers: at least one non-blank literal is required")
    if not lazy:  # a user's rule: its patterns are tried on crafted probes before they meet a log
        check_pattern(pattern, triggers, who, "pattern")
        for k, compiled in [*extract.items(), *extract_all.items()]:
            check_pattern(compiled, triggers, who, f"extract.{k}")
    return CompiledRule(rule, where, pattern, extract, extract_all, triggers, builtin=lazy)


#: packs built with rule directories of their own, newest last (see :func:`loaded_packs`)
_LOADED: list[weakref.ref[RulePack]] = []


def loaded_packs() -> list[RulePack]:
    """The packs :func:`load_pack` built from rule directories and still in use, newest first: the
    advisor finds there the remedies of a rule the built-in pack lacks."""
    _LOADED[:] = [ref for ref in _LOADED if ref() is not None]
    return [p for p in (ref() for ref in reversed(_LOADED)) if p is not None]


def load_pack(
    dirs: Iterable[Path] | None = None, *, include_builtin: bool = True, check_remedies: bool = True
) -> RulePack:
    """Load the built-in pack and/or rule directories (later ones override rules by id)."""
    paths: list[Path] = []
    if include_builtin:
        paths.append(builtin_rules_dir())
    paths.extend(dirs or [])
    known: set[str] | None = None
    if check_remedies:
        known = set(remedy_ids())
    pack = RulePack()
    by_id: dict[str, int] = {}
    user_rules = 0
    for index, d in enumerate(paths):
        # the built-in pack compiles its regexes on first use (see LazyPattern)
        lazy = include_builtin and index == 0
        if not d.exists():
            raise RulePackError(f"{_display(d)}: no such rule directory")
        files = [d] if d.is_file() else sorted(d.glob("*.toml"))
        if d.is_dir() and not files:
            raise RulePackError(f"{_display(d)}: no *.toml rule files")
        seen_here: dict[str, str] = {}
        seen_context: dict[str, str] = {}
        for f in files:
            rf = read_rule_file(f)
            where = _display(f)
            pack.sources.append(where)
            if not lazy:
                user_rules += len(rf.rule)
                if user_rules > MAX_USER_RULES:
                    raise RulePackError(
                        f"{where}: too many rules: the rule directories hold more than {MAX_USER_RULES} "
                        "(each is tried on every line its triggers find; split the pack or drop unused rules)"
                    )
            for rule in rf.rule:
                if rule.id in seen_here:
                    raise RulePackError(
                        f'{where}: rule "{rule.id}": id: duplicate rule id (also in {seen_here[rule.id]})'
                    )
                seen_here[rule.id] = where
                try:
                    compiled = _compile_rule(rule, where, known, lazy)
                except CatastrophicPattern as exc:
                    pack.warnings.append(str(exc))
                    continue
                if rule.id in by_id and pack.rules[by_id[rule.id]].builtin:
                    pack.warnings.append(
                        f'{where}: rule "{rule.id}": replaces the built-in rule of that id '
                        "(give it an id of its own to add a rule beside it)"
                    )
                if rule.id in by_id:
                    compiled.order = pack.rules[by_id[rule.id]].order
                    pack.rules[by_id[rule.id]] = compiled
                else:
                    compiled.order = len(pack.rules)
                    by_id[rule.id] = len(pack.rules)
                    pack.rules.append(compiled)
            for ctx in rf.context:
                who = f'{where}: context "{ctx.id}"'
                if ctx.id in seen_context:
                    raise RulePackError(f"{who}: id: duplicate context id (also in {seen_context[ctx.id]})")
                seen_context[ctx.id] = where
                if ctx.periodic:
                    ordered = sorted(set(group_names(ctx.pattern)) & ORDERED_GROUPS)
                    if ordered:
                        raise RulePackError(
                            f"{who}: periodic: a periodic rule's groups may only set values"
                            f" (group {ordered[0]!r} depends on the lines before)"
                        )
                pack.contexts.append(
                    CompiledContext(ctx, where, _compile(ctx.pattern, who, "pattern", lazy),
                                    tuple(t.lower() for t in ctx.triggers))
                )
            for prod in rf.product:
                pack.products[prod.id] = prod
            for i, ph in enumerate(rf.phase):
                who = f"{where}: phase[{i}]"
                compiled_phase = CompiledPhase(
                    ph,
                    frozenset(f for f in ph.frames if "::" not in f),
                    tuple(p.replace("\\", "/") for p in ph.paths),
                    tuple(_compile(p, who, "markers", lazy) for p in ph.markers),
                    tuple(_compile(p, who, "progress", lazy) for p in ph.progress),
                    tuple(t.lower() for t in ph.triggers),
                    tuple(
                        (piece.replace("\\", "/"), name)
                        for piece, _, name in (f.rpartition("::") for f in ph.frames if "::" in f)
                    ),
                    frozenset(ph.processes),
                    tuple(
                        (engine, piece.replace("\\", "/"), name)
                        for engine, frames in ph.engine_frames.items()
                        for piece, _, name in (f.rpartition("::") for f in frames)
                    ),
                )
                # one table per phase: the generated evidence (rules/phases.generated.toml) and
                # the hand-written (rules/phases.toml) of a phase are asked together, in the order
                # the phase first appears
                same = next((k for k, p in enumerate(pack.phases) if p.rule.phase == ph.phase), None)
                if same is None:
                    pack.phases.append(compiled_phase)
                else:
                    pack.phases[same] = pack.phases[same].merged(compiled_phase)
    pack.phases.sort(key=lambda p: PHASE_PRIORITY.index(p.rule.phase) if p.rule.phase in PHASE_PRIORITY else len(PHASE_PRIORITY))
    for c in pack.contexts:
        if c.rule.product is not None and c.rule.product not in pack.products:
            raise RulePackError(
                f'{c.source}: context "{c.rule.id}": product: {c.rule.product!r} is no [[product]] id'
                f" (known: {', '.join(sorted(pack.products))})"
            )
    if len(paths) > int(include_builtin):
        _LOADED.append(weakref.ref(pack))
    return pack


@lru_cache(maxsize=1)
def default_pack() -> RulePack:
    """The built-in pack, loaded once per process."""
    return load_pack()
