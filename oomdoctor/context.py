"""Collect run facts from non-error lines: engine, version, model, launch args, memory figures."""

from __future__ import annotations

import ast
import shlex
import types
import typing
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from oomdoctor import regex_cache
from oomdoctor.figures import convert
from oomdoctor.report import Context

if TYPE_CHECKING:
    from oomdoctor.rulepack.model import Product

# key=value scanning for Namespace(...) and "with config: a=b, c=d" dumps (an object's repr,
# ``<ConfigFormat.AUTO: 'auto'>``, is one value)
_KV = regex_cache.compile(
    r"(?P<key>[A-Za-z_][\w.]*)=(?P<value><[^<>\n]*>|'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|"
    r"\((?:[^()]|\((?:[^()])*\))*\)|\[(?:[^\[\]]|\[[^\[\]]*\])*\]|\{(?:[^{}]|\{[^{}]*\})*\}|[^,()\s]+(?:\([^()]*\))?)"
)
_DICT_ITEM = regex_cache.compile(
    r"'(?P<key>[\w.\-]+)':\s*(?P<value>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\[[^\]]*\]|\{[^{}]*\}|[^,{}]+)"
)

#: launch-arg spellings -> Context field
ARG_FIELDS: dict[str, str] = {
    "model": "model",
    "model_tag": "model",
    "model_path": "model",  # SGLang's --model-path
    "max_model_len": "max_model_len",
    "max_seq_len": "max_model_len",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size",
    "dtype": "dtype",
    "quantization": "quantization",
    "kv_cache_dtype": "kv_cache_dtype",
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "enforce_eager": "enforce_eager",
    "block_size": "block_size",
}


def _field_kind(name: str) -> str:
    ann = Context.model_fields[name].annotation
    args = typing.get_args(ann) if isinstance(ann, types.UnionType) or typing.get_origin(ann) else (ann,)
    for a in args:
        if a is bool:
            return "bool"
        if a is int:
            return "size" if name.endswith("_bytes") else "int"
        if a is float:
            return "float"
        if a is str:
            return "str"
    return "str"


_FIELD_KINDS = {name: _field_kind(name) for name in Context.model_fields}


def _literal(text: str) -> Any:
    text = text.strip()
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def _clean_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return "None"
    return str(value)


def parse_python_dict(text: str) -> dict[str, str]:
    text = text.strip()
    try:
        val = ast.literal_eval(text)
        if isinstance(val, dict):
            return {str(k): _clean_value(v) for k, v in val.items()}
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    return {m["key"]: _clean_value(_literal(m["value"])) for m in _DICT_ITEM.finditer(text)}


def parse_key_values(text: str) -> dict[str, str]:
    return {m["key"]: _clean_value(_literal(m["value"])) for m in _KV.finditer(text)}


#: a drive-letter path (``C:\models``) in a command line copied from Windows
_WINDOWS_PATH = regex_cache.compile(r"(?<![\w])[A-Za-z]:\\[^\s\\]")


def parse_argv(text: str) -> tuple[list[str], dict[str, str]]:
    """Split a shell command line; return argv and its ``--flag value`` pairs as snake_case keys."""
    line = text.replace("\\\n", " ")
    if _WINDOWS_PATH.search(line):
        # a Windows path (C:\models\...): its backslashes are separators, not shell escapes
        line = line.replace("\\", "\\\\")
    try:
        argv = shlex.split(line)
    except ValueError:
        argv = text.split()
    args: dict[str, str] = {}
    positional: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok.startswith("--"):
            key, eq, val = tok[2:].partition("=")
            key = key.replace("-", "_")
            if eq:
                args[key] = val
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                args[key] = argv[i + 1]
                i += 1
            else:
                args[key] = "True"
        else:
            positional.append(tok)
        i += 1
    # `vllm serve MODEL`: the model is the positional after "serve"
    if "serve" in positional:
        idx = positional.index("serve")
        if idx + 1 < len(positional) and "model" not in args:
            args["model"] = positional[idx + 1]
    return argv, args


def _to_field(name: str, value: str) -> Any:
    kind = _FIELD_KINDS.get(name, "str")
    v = value.strip().strip("'\"")
    if kind == "bool":
        if v.lower() in ("true", "1", "yes"):
            return True
        if v.lower() in ("false", "0", "no"):
            return False
        return None
    if kind == "str":
        if v in ("None", "", "auto") and name in ("quantization", "kv_cache_dtype"):
            return None if v == "None" else v
        if name == "dtype" and v.startswith("torch."):
            v = v[len("torch.") :]
        return None if v == "None" else v
    return convert(name, v, {name: kind}, {})


#: engine -> the engines it runs inside itself, whose lines it prints too (it names the log)
_WRAPS: dict[str, frozenset[str]] = {"ollama": frozenset({"llama.cpp"})}

#: a package's name, as ``pip list``/``pip freeze``, ``collect_env`` or an environment check prints
#: it (a context rule's ``engine`` group), -> the engine it is
LISTED_ENGINES: dict[str, str] = {
    "vllm": "vllm",
    "sglang": "sglang",
    "tensorrt-llm": "tensorrt-llm",
    "tensorrt_llm": "tensorrt-llm",
    "torch": "pytorch",
    "pytorch": "pytorch",
}


def product_for_engine(engine: str | None, products: Mapping[str, Product]) -> str | None:
    """The product an engine names when no line names one (a product's ``engines``): the most
    specific such product (rules/products.toml)."""
    if engine is None:
        return None
    named = [p for p in products.values() if engine in p.engines]
    return max(named, key=lambda p: p.priority).id if named else None


#: a context rule's group naming the device a line's sizes belong to (llama.cpp's "CUDA1 KV buffer
#: size = ..."): its ``*_bytes`` groups are kept per device (see ContextCollector.apply_groups)
PER_DEVICE_GROUP = "device_name"


class ContextCollector:
    """Accumulates :class:`Context` from context-rule matches as lines pass."""

    def __init__(self, products: Mapping[str, Product] | None = None) -> None:
        self.context = Context()
        #: the product table (rules/products.toml): priorities and engine fallbacks
        self.products: Mapping[str, Product] = products or {}
        self._products: Counter[str] = Counter()
        self._product_first: dict[str, int] = {}
        self._engines: Counter[str] = Counter()
        self._engine_first: dict[str, int] = {}
        #: engines only named by a package list (``pip list``, ``collect_env``): weaker evidence,
        #: counted only when nothing else names one (SGLang's environment check lists vLLM too)
        self._listed: Counter[str] = Counter()
        self._listed_first: dict[str, int] = {}
        #: engine -> the latest version a line gave for it
        self._versions: dict[str, str] = {}
        #: field (or ``extra`` key) -> where in the input the value it holds was read (see apply_groups)
        self._set_at: dict[str, int] = {}

    def vote_engine(self, engine: str, line: int) -> None:
        self._engines[engine] += 1
        # the first line by number (deferred lines are read after later ones)
        self._engine_first[engine] = min(line, self._engine_first.get(engine, line))

    def vote_product(self, product: str, line: int) -> None:
        """Note a line that names the product the user runs (a context rule's ``product``)."""
        self._products[product] += 1
        self._product_first[product] = min(line, self._product_first.get(product, line))

    def product(self) -> str | None:
        """The product the log names: of those its lines name (and the one its engine names, see
        :func:`product_for_engine`), the most specific (the highest ``priority``: an RL framework
        over the vLLM it embeds, ollama over its llama.cpp), then the most named, then the first
        named; None when nothing says."""
        engine = self.engine()
        candidates = {
            p: n for p, n in self._products.items()
            if not (p in self.products and self.products[p].needs_engine) or engine in self.products[p].needs_engine
        }
        by_engine = product_for_engine(engine, self.products)
        if by_engine is not None:
            candidates.setdefault(by_engine, 0)
        if not candidates:
            return None

        def key(p: str) -> tuple[int, int, int]:
            prod = self.products.get(p)
            return (prod.priority if prod else 0, candidates[p], -self._product_first.get(p, 1 << 62))

        return max(candidates, key=key)

    def list_engine(self, package: str, line: int) -> str | None:
        """Note a package list's line naming ``package``; return the engine it is, if one."""
        engine = LISTED_ENGINES.get(package.lower())
        if engine is not None:
            self._listed[engine] += 1
            self._listed_first[engine] = min(line, self._listed_first.get(engine, line))
        return engine

    def engine(self) -> str | None:
        votes, first = (self._engines, self._engine_first) if self._engines else (self._listed, self._listed_first)
        if not votes:
            return None
        generic = {"pytorch", "python", "cuda", "linux", "host"}
        specific = [e for e in votes if e not in generic]
        pool = specific or list(votes)
        # a tool that runs another one prints that one's lines too: ollama runs llama.cpp
        wrapped = {w for e in pool for w in _WRAPS.get(e, ())}
        pool = [e for e in pool if e not in wrapped] or pool
        return max(pool, key=lambda e: (votes[e], -first[e]))

    def apply_args(self, args: dict[str, str], argv: list[str] | None = None, *, typed: bool = False,
                   dump: bool = False, at: int | None = None) -> None:
        """``typed``: the user wrote these (``non-default args``), not an engine's config dump;
        ``dump``: every launch argument with its default (``Namespace(...)``, ``ServerArgs(...)``);
        ``at``: where the line is (see :meth:`apply_groups`)."""
        ctx = self.context
        ctx.launch_args.update(args)
        if typed:
            ctx.typed_args.update(args)
        if dump:
            ctx.dump_args.update(args)
        if argv:
            ctx.command = argv
        for key, value in args.items():
            name = ARG_FIELDS.get(key)
            if name is None:
                continue
            parsed = _to_field(name, value)
            if parsed is not None and (at is None or self._set_at.get(name, at) <= at):
                setattr(ctx, name, parsed)
                if at is not None:
                    self._set_at[name] = at

    def apply_groups(
        self,
        groups: dict[str, str | None],
        parser: str | None,
        units: dict[str, str],
        engine: str | None = None,
        at: int | None = None,
    ) -> None:
        """Set the Context fields (or ``extra`` entries) a context line's named groups give.

        ``engine``: the engine the line is about; a version it gives is that engine's (the report's
        ``engine_version`` is the version of the engine the log is found to be, see :meth:`finish`).
        ``at``: where the line is in the input (ascending); a value read from a later line is kept
        over this one's, so lines read out of order (a periodic line set aside, read later) leave
        what reading in order leaves.
        """
        ctx = self.context
        device = groups.get(PER_DEVICE_GROUP)
        if device is not None:
            # one device's figure of several (llama.cpp's buffer lines, one per device): kept per
            # device in ``extra["<name>_by_device"]``, never as one value for the whole run
            for name, text in groups.items():
                if name != PER_DEVICE_GROUP and text is not None and name.endswith("_bytes"):
                    key = f"{name}_by_device"
                    slot = f"{key}/{device.strip()}"
                    if at is not None and self._set_at.get(slot, at) > at:
                        continue  # a later line set it
                    value = convert(name, text, {}, units)
                    if value is not None:
                        table = ctx.extra.setdefault(key, {})
                        table[device.strip()] = value
                        ctx.extra[key] = dict(sorted(table.items()))  # the same order however read
                        if at is not None:
                            self._set_at[slot] = at
            return
        for name, text in groups.items():
            if text is None:
                continue
            if at is not None and self._set_at.get(name, at) > at:
                continue  # a later line set it
            if name == "engine_version" and engine is not None:
                self._versions[engine] = text.strip()
                continue
            if name == "args":
                if parser == "python-dict":
                    self.apply_args(parse_python_dict(text), typed=True, at=at)
                elif parser in ("namespace", "config"):
                    self.apply_args(parse_key_values(text), dump=parser == "namespace", at=at)
                elif parser == "argv":
                    argv, args = parse_argv(text)
                    self.apply_args(args, argv, at=at)
                continue
            if name in Context.model_fields and name not in ("launch_args", "extra", "command"):
                kind = _FIELD_KINDS[name]
                if kind in ("str", "bool"):
                    value = _to_field(name, text)
                else:
                    value = convert(name, text, {name: kind}, units)
                if value is not None:
                    setattr(ctx, name, value)
                    if at is not None:
                        self._set_at[name] = at
            else:
                value = convert(name, text, {}, units)
                if name.endswith("_pids"):  # one process per line (a launcher's list of its ranks): every one kept
                    pids = set(ctx.extra.get(name) or ())
                    pids.add(text.strip())
                    ctx.extra[name] = sorted(pids, key=lambda p: (len(p), p))
                    continue
                if name == "k8s_memory_bytes":  # a `memory:` line is the limit only inside a Limits block
                    if value is not None and str(ctx.extra.get("k8s_block", "")).lower() == "limits" and (
                        at is None or self._set_at.get("memory_limit_bytes", at) <= at
                    ):
                        ctx.extra["memory_limit_bytes"] = value
                        if at is not None:
                            self._set_at["memory_limit_bytes"] = at
                    continue
                ctx.extra[name] = value if value is not None else text.strip()
                if at is not None:
                    self._set_at[name] = at

    def finish(self) -> Context:
        eng = self.engine()
        if eng is not None:
            self.context.engine = eng
            if eng in self._versions:
                self.context.engine_version = self._versions[eng]
        product = self.product()
        if product is not None:
            self.context.product = product
            runs = self.products[product].runs if product in self.products else None
            if self.context.engine is None and runs is not None:
                # the program names the engine it runs: a bare allocator message in its log came from it
                self.context.engine = runs
        if "pytorch" in self._versions:  # the framework under any engine
            self.context.extra["torch_version"] = self._versions["pytorch"]
        return self.context
