"""Generate ``oomdoctor/data/engine_args/<engine>.json`` from the engines' own argument parsers.

The engines' parsers cannot be run here (they import torch and CUDA kernels), so this script reads
their source with :mod:`ast`: every ``add_argument(...)`` call of the files that build the
server's parser, with the flag spellings it registers, whether the flag takes a value, whether
``argparse.BooleanOptionalAction`` adds a ``--no-`` form, and its ``choices``. Flags built from
config dataclasses (vLLM 0.8+: ``add_argument("--dtype", **model_kwargs["dtype"])`` with
``model_kwargs = get_kwargs(ModelConfig)``, or a loop over every field of ``FrontendArgs``) are
resolved from the dataclass field's annotation, the way vLLM's ``get_kwargs`` does: ``bool`` is
a switch with a ``--no-`` form, ``Literal[...]`` gives the choices, anything else takes a value.

Usage (``tools/fetch_engine_sources.sh DEST`` fetches the sampled releases; by hand: one wheel at
a time, wheels are large, only the Python sources are kept)::

    pip download --no-deps --only-binary :all: --python-version 3.12 \\
        --platform manylinux1_x86_64 --platform manylinux_2_31_x86_64 vllm==0.11.0 -d wheels/
    unzip -q wheels/vllm-0.11.0-*.whl 'vllm/*.py' -d src/vllm-0.11.0
    python tools/gen_engine_args.py vllm src/vllm-0.5.5 src/vllm-0.6.6 ... > oomdoctor/data/engine_args/vllm.json

Each SRC directory is named ``<engine>-<version>``. The output keeps, per flag, the sampled
versions where it exists as ``[first, last]`` ranges, and its default as ``[first, last, default]``
ranges: the default as a ``Namespace(...)`` / ``ServerArgs(...)`` dump prints it (``None``,
``False``, ``0.9``, ``auto``), null where it is not a literal (computed at run time), so that a
command rebuilt from such a dump keeps only what the user changed; :mod:`oomdoctor.advisor.engine_args`
answers for the versions in between (and says "unknown" where two samples disagree).
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

#: the files that build each engine's server parser (relative to the unpacked wheel), by glob
PARSER_FILES: dict[str, list[str]] = {
    "vllm": [
        "vllm/engine/arg_utils.py",
        "vllm/entrypoints/openai/cli_args.py",
        "vllm/entrypoints/common/cli_args.py",
        "vllm/entrypoints/cli/serve.py",
    ],
    "sglang": ["sglang/srt/server_args.py"],
}
#: where the config dataclasses live (searched for the classes named by ``get_kwargs``)
CLASS_FILES: dict[str, list[str]] = {
    "vllm": ["vllm/config.py", "vllm/config/*.py", "vllm/transformers_utils/config.py", "vllm/engine/arg_utils.py", "vllm/entrypoints/**/cli_args.py",
             "vllm/v1/**/config.py", "vllm/compilation/*.py", "vllm/kernels/**/config.py"],
    "sglang": ["sglang/srt/server_args.py"],
}
_TYPE_ALIAS = getattr(ast, "TypeAlias", ())  # Python 3.12+
#: a default that is not a literal (a function call, a computed value): unknown to the data
UNKNOWN: Any = object()
_FACTORIES: dict[str, Any] = {"list": [], "dict": {}, "set": set(), "tuple": ()}
#: standard-library constants the parsers use as defaults (their values are fixed by Python)
_STDLIB: dict[str, Any] = {"ssl.CERT_NONE": 0, "ssl.CERT_OPTIONAL": 1, "ssl.CERT_REQUIRED": 2}
SWITCH_ACTIONS = {"store_true", "store_false", "store_const", "count"}


def _version_key(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split("."):
        digits = "".join(c for c in part if c.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


class Source:
    """The parsed modules of one unpacked release."""

    def __init__(self, root: Path, engine: str) -> None:
        self.root = root
        self.trees: dict[Path, ast.Module] = {}
        for pattern in PARSER_FILES[engine] + CLASS_FILES[engine]:
            for path in sorted(root.glob(pattern)):
                if path not in self.trees:
                    try:
                        self.trees[path] = ast.parse(path.read_text(encoding="utf-8"))
                    except SyntaxError:
                        continue
        self.parser_files = [p for pattern in PARSER_FILES[engine] for p in sorted(root.glob(pattern))]
        self.classes: dict[str, ast.ClassDef] = {}
        self.aliases: dict[str, ast.expr] = {}
        for tree in self.trees.values():
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    self.classes.setdefault(node.name, node)
            for node in tree.body:
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    self.aliases.setdefault(node.targets[0].id, node.value)
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                    self.aliases.setdefault(node.target.id, node.value)
                elif isinstance(node, _TYPE_ALIAS) and isinstance(node.name, ast.Name):
                    self.aliases.setdefault(node.name.id, node.value)

    def fields(self, cls_name: str, seen: set[str] | None = None) -> dict[str, ast.expr]:
        """Annotated fields of a dataclass, its bases' first."""
        seen = seen or set()
        cls = self.classes.get(cls_name)
        if cls is None or cls_name in seen:
            return {}
        seen.add(cls_name)
        out: dict[str, ast.expr] = {}
        for base in cls.bases:
            if isinstance(base, ast.Name):
                out.update(self.fields(base.id, seen))
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                ann = node.annotation
                if isinstance(ann, ast.Subscript) and _name(ann.value) == "ClassVar":
                    continue
                if not node.target.id.startswith("_"):
                    out[node.target.id] = ann
        return out

    def class_default(self, cls_name: str, attr: str, depth: int = 0) -> Any:
        """The default of ``cls_name.attr`` (a dataclass field or class constant, bases searched),
        or :data:`UNKNOWN` when it has none or it is not a literal."""
        cls = self.classes.get(cls_name)
        if cls is None or depth > 8:
            return UNKNOWN
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == attr:
                return UNKNOWN if node.value is None else self.value_of(node.value, depth + 1, field=True)
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id == attr):
                return self.value_of(node.value, depth + 1, field=True)
        for base in cls.bases:
            got = self.class_default(_name(base), attr, depth + 1)
            if got is not UNKNOWN:
                return got
        return UNKNOWN

    def value_of(self, node: ast.expr, depth: int = 0, field: bool = False) -> Any:
        """The Python value ``node`` evaluates to when it is a literal, a module constant, a class
        attribute (``EngineArgs.dtype``) or a dataclass ``field(default=...)``; else :data:`UNKNOWN`."""
        if depth > 8:
            return UNKNOWN
        try:
            return ast.literal_eval(node)
        except (ValueError, SyntaxError, TypeError):
            pass
        if isinstance(node, ast.Name):
            alias = self.aliases.get(node.id)
            return UNKNOWN if alias is None else self.value_of(alias, depth + 1)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in self.classes:
            return self.class_default(node.value.id, node.attr, depth + 1)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            return _STDLIB.get(f"{node.value.id}.{node.attr}", UNKNOWN)
        if isinstance(node, ast.Call):
            func = _name(node.func)
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            if func in ("int", "str", "float") and len(node.args) == 1 and not node.keywords:
                inner = self.value_of(node.args[0], depth + 1)  # int(ssl.CERT_NONE)
                return UNKNOWN if inner is UNKNOWN else {"int": int, "str": str, "float": float}[func](inner)
            if field and func in ("field", "Field"):
                if "default" in kw:
                    return self.value_of(kw["default"], depth + 1)
                if node.args and func == "Field":
                    return self.value_of(node.args[0], depth + 1)
                factory = _name(kw["default_factory"]) if "default_factory" in kw else ""
                return _FACTORIES.get(factory, UNKNOWN)
            if func in _FACTORIES and not node.args and not node.keywords:
                return _FACTORIES[func]
        return UNKNOWN

    def subclasses(self, cls_name: str) -> list[str]:
        return [n for n, c in self.classes.items() if any(_name(b) == cls_name for b in c.bases)]

    def literal_choices(self, ann: ast.expr, depth: int = 0) -> list[str] | None:
        """The values of a ``Literal[...]`` annotation (through aliases and unions), or None."""
        if depth > 6:
            return None
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            try:
                ann = ast.parse(ann.value, mode="eval").body
            except SyntaxError:
                return None
        if isinstance(ann, ast.Name) and ann.id in self.aliases:
            return self.literal_choices(self.aliases[ann.id], depth + 1)
        if isinstance(ann, ast.Subscript):
            head = _name(ann.value)
            elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            if head == "Literal":
                vals = [e.value for e in elts if isinstance(e, ast.Constant)]
                return [str(v) for v in vals if v is not None]
            if head in ("Optional", "Union", "Annotated"):
                for e in elts if head != "Annotated" else elts[:1]:
                    got = self.literal_choices(e, depth + 1)
                    if got:
                        return got
        if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
            return self.literal_choices(ann.left, depth + 1) or self.literal_choices(ann.right, depth + 1)
        return None

    def is_bool(self, ann: ast.expr, depth: int = 0) -> bool:
        if depth > 6:
            return False
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            try:
                ann = ast.parse(ann.value, mode="eval").body
            except SyntaxError:
                return False
        if isinstance(ann, ast.Name):
            if ann.id == "bool":
                return True
            alias = self.aliases.get(ann.id)
            return alias is not None and self.is_bool(alias, depth + 1)
        if isinstance(ann, ast.Subscript):
            head = _name(ann.value)
            elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            if head in ("Optional", "Union"):
                return any(self.is_bool(e, depth + 1) for e in elts)
            if head == "Annotated":
                return self.is_bool(elts[0], depth + 1)
        if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
            return self.is_bool(ann.left, depth + 1) or self.is_bool(ann.right, depth + 1)
        return False

    def choices_of(self, node: ast.expr) -> list[str] | None:
        """``choices=`` written as a literal list, a name bound to one, or ``get_args(Literal alias)``."""
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            vals = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            return [str(v) for v in vals if v is not None] if len(vals) == len(node.elts) else None
        if isinstance(node, ast.Name) and node.id in self.aliases:
            return self.choices_of(self.aliases[node.id])
        if isinstance(node, ast.Call) and _name(node.func) in ("get_args", "list") and node.args:
            arg = node.args[0]
            return self.literal_choices(arg) or self.choices_of(arg)
        return None


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _kwargs_bindings(func: ast.AST) -> dict[str, str]:
    """``x = get_kwargs(Cls)`` in a function body: x -> Cls."""
    out: dict[str, str] = {}
    for node in ast.walk(func):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call) and _name(node.value.func) == "get_kwargs"
                and node.value.args):
            cls = node.value.args[0]
            out[node.targets[0].id] = _name(cls) if _name(cls) != "cls" else ""
    return out


def _owner_class(tree: ast.Module, func: ast.AST) -> str:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and func in node.body:
            return node.name
    return ""


def default_text(value: Any) -> str | None:
    """A default as a ``Namespace(...)`` / ``ServerArgs(...)`` dump shows it once read back
    (:func:`oomdoctor.context.parse_key_values`): ``None``, ``False``, ``0.9``, ``auto``, ``[]``;
    None when unknown."""
    if value is UNKNOWN:
        return None
    if isinstance(value, str):
        return value
    return "None" if value is None else str(value)


def _entry(kind: str, no_flag: bool = False, choices: list[str] | None = None) -> dict[str, Any]:
    e: dict[str, Any] = {"kind": kind}
    if no_flag:
        e["no_flag"] = True
    if choices:
        e["choices"] = sorted(set(choices))
    return e


def _dataclass_entry(src: Source, cls: str, field: str) -> dict[str, Any]:
    """A flag built from a config dataclass field; its default is the field's (vLLM's get_kwargs)."""
    ann = src.fields(cls).get(field)
    default = default_text(src.class_default(cls, field))
    if ann is None:
        entry = _entry("value")
    elif src.is_bool(ann):
        entry = _entry("switch", no_flag=True)
    else:
        entry = _entry("value", choices=src.literal_choices(ann))
    entry["default"] = default
    return entry


def extract(src: Source) -> dict[str, dict[str, Any]]:
    """Every long flag the server parser registers, with how it is written."""
    flags: dict[str, dict[str, Any]] = {}
    for path in src.parser_files:
        tree = src.trees.get(path)
        if tree is None:
            continue
        funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for func in funcs:
            bindings = _kwargs_bindings(func)
            owner = _owner_class(tree, func)
            for name, cls in list(bindings.items()):
                if not cls:
                    bindings[name] = owner
            for call in ast.walk(func):
                if not (isinstance(call, ast.Call) and _name(call.func) == "add_argument"):
                    continue
                _one_call(src, call, func, bindings, owner, flags)
    return flags


def _one_call(src: Source, call: ast.Call, func: ast.AST, bindings: dict[str, str], owner: str,
              flags: dict[str, dict[str, Any]]) -> None:
    names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    dynamic = [a for a in call.args if isinstance(a, ast.JoinedStr)]
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    splat: list[ast.expr] = []
    for k in call.keywords:
        if k.arg is not None:
            continue
        if isinstance(k.value, ast.Dict):  # **{**cache_kwargs["x"], "action": ...}
            for key, val in zip(k.value.keys, k.value.values, strict=True):
                if key is None:
                    splat.append(val)
                elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                    kw[key.value] = val
        else:
            splat.append(k.value)
    if dynamic and not names:
        # for key, value in get_kwargs(Cls).items(): add_argument(f"--{key.replace('_', '-')}", **value);
        # with get_kwargs(cls) in a classmethod, every subclass registers its own fields too
        cls = next(iter(bindings.values()), owner) or owner
        for c in [cls, *src.subclasses(cls)]:
            for field in src.fields(c):
                flags.setdefault("--" + field.replace("_", "-"), _dataclass_entry(src, c, field))
        return
    longs = [n for n in names if n.startswith("--")]
    if not longs:
        return
    entry: dict[str, Any] | None = None
    for s in splat:  # **model_kwargs["dtype"]
        if isinstance(s, ast.Subscript) and isinstance(s.value, ast.Name) and s.value.id in bindings:
            field_name = s.slice.value if isinstance(s.slice, ast.Constant) else None
            if isinstance(field_name, str):
                entry = _dataclass_entry(src, bindings[s.value.id], field_name)
    if entry is None:
        entry = _entry("value")
    field_default = entry.get("default", UNKNOWN)  # a dataclass-built flag's field default
    action = kw.get("action")
    if action is not None:
        aname = action.value if isinstance(action, ast.Constant) else _name(action)
        if aname in SWITCH_ACTIONS:
            entry = _entry("switch")
        elif aname == "BooleanOptionalAction":
            entry = _entry("switch", no_flag=True)
        elif aname in ("append", "store", "extend"):
            entry = _entry("value", choices=entry.get("choices"))
    nargs = kw.get("nargs")
    if isinstance(nargs, ast.Constant) and nargs.value in ("?", "*"):
        entry = dict(entry, kind="optional")
        entry.pop("no_flag", None) if action is None else None
    if "choices" in kw:
        choices = src.choices_of(kw["choices"])
        if choices:
            entry = dict(entry, choices=sorted(set(choices)))
        else:
            entry.pop("choices", None)
    if "default" in kw:
        entry = dict(entry, default=default_text(src.value_of(kw["default"])))
    elif field_default is not UNKNOWN:
        entry = dict(entry, default=field_default)
    else:
        aname = "" if action is None else (action.value if isinstance(action, ast.Constant) else _name(action))
        entry = dict(entry, default={"store_true": "False", "store_false": "True"}.get(str(aname), "None"))
    dest = kw.get("dest")
    if isinstance(dest, ast.Constant) and isinstance(dest.value, str) and dest.value != longs[0][2:].replace("-", "_"):
        entry = dict(entry, dest=dest.value)  # the name a Namespace dump shows it under
    for n in longs:
        flags[n] = entry
    for n in names:
        if n.startswith("-") and not n.startswith("--"):
            flags.setdefault(n, dict(entry, alias_of=longs[0]))


def build(engine: str, roots: list[Path]) -> dict[str, Any]:
    samples: list[tuple[str, dict[str, dict[str, Any]]]] = []
    for root in roots:
        version = root.name.split("-", 1)[1]
        samples.append((version, extract(Source(root, engine))))
    samples.sort(key=lambda s: _version_key(s[0]))
    versions = [v for v, _ in samples]
    out: dict[str, Any] = {}
    for flag in sorted({f for _, fl in samples for f in fl}):
        ranges: list[list[str]] = []
        last: dict[str, Any] = {}
        choices: dict[str, list[str]] = {}
        kinds: dict[str, str] = {}
        defaults: list[list[str | None]] = []  # [first, last, default] over consecutive samples
        prev_in = False
        for v, fl in samples:
            if flag in fl:
                if prev_in:
                    ranges[-1][1] = v
                else:
                    ranges.append([v, v])
                last = fl[flag]
                kinds[v] = fl[flag]["kind"]
                if "choices" in fl[flag]:
                    choices[v] = fl[flag]["choices"]
                default = fl[flag].get("default")
                if prev_in and defaults[-1][2] == default:
                    defaults[-1][1] = v
                else:
                    defaults.append([v, v, default])
            prev_in = flag in fl
        rec = {k: val for k, val in last.items() if k not in ("choices", "default")}
        rec["defaults"] = defaults
        rec["versions"] = ranges
        if len(set(kinds.values())) > 1:  # e.g. a switch that once took an optional value
            rec["kinds"] = kinds
        if choices:
            rec["choices"] = choices
        out[flag] = rec
    return {
        "engine": engine,
        "generated_by": "tools/gen_engine_args.py",
        "note": "Flags of the server's argument parser per sampled release; see the generator's docstring.",
        "samples": versions,
        "flags": out,
    }


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in PARSER_FILES:
        print(__doc__, file=sys.stderr)
        return 2
    data = build(argv[0], [Path(a) for a in argv[1:]])
    json.dump(data, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
