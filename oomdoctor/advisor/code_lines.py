"""Where each change of a remedy runs: its environment, flags and settings as code lines, each
labelled with its language and its place (issue 37: every line that looks like code is code that
runs where it says; prose stays prose).

- environment variables: ``export VAR=value`` (shell);
- flags: the words to put on the program's command line (shell), ``where`` the program
  (``vllm serve``, ``docker run``);
- settings, grouped by where they go: a Python call (``LLM(..., max_model_len=8192)``,
  ``TrainingArguments(..., bf16=True)``), a JSON object (a DeepSpeed config, an ollama API request's
  options) or YAML (a Kubernetes container spec, a LLaMA-Factory config). ``...`` in a call stands
  for the arguments the user already passes.

A setting with no known place, or whose value is words ("half of the current value"), is no code
line: the renderers show it as prose (``name: words``). The advisor gives a flag or an environment
variable a value or nothing (tests/test_bounds.py); should one carry words (:func:`is_words`), it is
prose too, never printed as a command. The place of each product's settings
follows rules/advice/knobs.toml (the product's knobs) and the README's "Products and their knobs".
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from oomdoctor.i18n import N_
from oomdoctor.report import CodeLanguage, CodeLine, Remedy

#: a setting that can be code: a dotted name set to one word (``gradient_checkpointing=true``,
#: ``zero_optimization.stage=3``, ``optim=adamw_bnb_8bit``); any other is prose
_SETTING_KEY = re.compile(r"[A-Za-z_][\w.\-]*", re.ASCII)
_SETTING_VALUE = re.compile(r"[\w.+\-/:@]+", re.ASCII)
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
#: a list of numbers as a keyword takes it (llama-cpp-python's ``tensor_split=[71, 29]``)
_NUMBER_LIST = re.compile(r"\[\d+(?:\.\d+)?(?:, \d+(?:\.\d+)?)*\]")
_PLAIN_YAML = re.compile(r"[A-Za-z_][\w.\-/]*", re.ASCII)
_YAML_WORDS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"})


#: a flag's or a variable's value as a command line takes it (numbers, names, paths, lists, ``a:b``)
_CODE_VALUE = re.compile(r"[\w.+\-/:@,=]*", re.ASCII)


def is_words(value: str) -> bool:
    """Whether a flag's or a variable's value is words about the value, not the value (a space, a
    bracket, any character no computed value has, in any language)."""
    return not _CODE_VALUE.fullmatch(value)


def is_code_setting(key: str, value: str) -> bool:
    """Whether ``key=value`` is a setting as a config file takes it, not words about one
    (``batch_size``: "half of the current value", ``model``: "an AWQ or GPTQ 4-bit checkpoint")."""
    return bool(_SETTING_KEY.fullmatch(key) and (_SETTING_VALUE.fullmatch(value) or _NUMBER_LIST.fullmatch(value)))


@dataclass(frozen=True)
class Form:
    """How a group of settings is written: ``kind`` "call" (``template`` with ``{}`` for the keyword
    arguments), "key-call" (the key is the function, the value its argument), "json" or "yaml"
    (dotted keys nested, under ``prefix`` when set)."""

    language: CodeLanguage
    where: str
    kind: str
    template: str = ""
    prefix: str = ""


def _call(where: str, template: str) -> Form:
    return Form("python", where, "call", template)


_TRAINING_ARGS = _call("TrainingArguments", "TrainingArguments(..., {})")
_DATALOADER = _call("DataLoader", "DataLoader(..., {})")
_FROM_PRETRAINED = _call("from_pretrained", "AutoModelForCausalLM.from_pretrained(..., {})")

#: settings of a product, whatever the key (the keywords of the call the product is used through)
PRODUCT_FORMS: dict[str, Form] = {
    "vllm-python": _call("LLM", "LLM(..., {})"),
    "llama-cpp-python": _call("Llama", "Llama(..., {})"),
    "langchain-llamacpp": _call("LlamaCpp", "LlamaCpp(..., {})"),
    "vllm-omni": Form("yaml", N_("the failing stage under stages: in the vLLM-Omni deploy config"), "yaml"),
    "hf-trainer": _TRAINING_ARGS,
    "transformers": _TRAINING_ARGS,
    "ollama": Form("json", N_("ollama API request"), "json", prefix="options"),
    "llama-factory": Form("yaml", N_("LLaMA-Factory config"), "yaml"),
    # Keras only: plain TensorFlow batches where its input pipeline does (``dataset.batch(N)``, the
    # arrays a TF1 ``Session.run`` feeds), which no one call says: its settings stay prose
    "keras": _call("model.fit", "model.fit(..., {})"),
    "diffusers": _call("pipe", "pipe(..., {})"),
    "monai": _call("sliding_window_inference", "sliding_window_inference(..., {})"),
}

#: (product, key) -> form, before the product's own
KEY_FORMS: dict[tuple[str, str], Form] = {
    ("trtllm", "KvCacheConfig.free_gpu_memory_fraction"): _call("KvCacheConfig", "KvCacheConfig({})"),
    ("trtllm", "max_num_tokens"): _call("LLM", "LLM(..., {})"),
    ("trtllm", "max_batch_size"): _call("LLM", "LLM(..., {})"),
}

#: the host's settings (the host.* remedies, whatever the product)
HOST_FORMS: dict[str, Form] = {
    "resources.limits.memory": Form("yaml", N_("Kubernetes container spec"), "yaml"),
    "use_safetensors": _FROM_PRETRAINED,
    "from_pretrained": _FROM_PRETRAINED,
}

#: keys that name one thing whatever the product (after the product's own)
GENERIC_FORMS: dict[str, Form] = {
    **dict.fromkeys(
        ("per_device_train_batch_size", "gradient_accumulation_steps", "gradient_checkpointing", "bf16", "optim",
         "dataloader_num_workers"),
        _TRAINING_ARGS,
    ),
    "num_workers": _DATALOADER,
    "torch.cuda.set_per_process_memory_fraction": Form("python", "torch.cuda.set_per_process_memory_fraction", "key-call"),
}

#: products whose training runs through transformers' Trainer, so TrainingArguments (or a subclass:
#: TRL's and unsloth's SFTConfig) takes the generic training keys; elsewhere they are prose
TRAINING_ARGS_PRODUCTS = frozenset({"transformers", "hf-trainer", "trl", "unsloth", "accelerate", "deepspeed"})

#: the program whose command line takes a product's (else an engine's) flags
PROGRAMS: dict[str, str] = {
    "vllm-serve": "vllm serve",
    "vllm": "vllm serve",
    "sglang": "python -m sglang.launch_server",
    "tgi": "text-generation-launcher",
    "lorax": "lorax-launcher",
    "llama.cpp": "llama-server",
    "trtllm": "trtllm-serve",
    "text-generation-webui": "python server.py",
    "xinference": "xinference launch",
}
#: flags of a host remedy: the container's
HOST_PROGRAM = "docker run"
#: flags whose program is not known
ANY_PROGRAM = N_("the launch command")


def _deepspeed_key(key: str) -> bool:
    from oomdoctor.advisor.knobs import knobs

    entry = knobs().get("deepspeed")
    return key != "num_workers" and entry is not None and entry.find("settings", key) is not None


def form_of(key: str, product: str | None, host: bool) -> Form | None:
    """Where setting ``key`` goes for ``product`` (``host``: a host remedy), or None (prose)."""
    if host and key in HOST_FORMS:
        return HOST_FORMS[key]
    p = product or ""
    if (p, key) in KEY_FORMS:
        return KEY_FORMS[(p, key)]
    if p == "deepspeed" and _deepspeed_key(key):
        return Form("json", N_("DeepSpeed config"), "json")
    if p in PRODUCT_FORMS and (p not in ("hf-trainer", "transformers") or key in GENERIC_FORMS):
        return PRODUCT_FORMS[p]
    form = GENERIC_FORMS.get(key)
    if form is _TRAINING_ARGS and p not in TRAINING_ARGS_PRODUCTS:
        # a plain PyTorch program (or one the log does not name) has no TrainingArguments: prose
        return None
    return form


def _literal(text: str) -> object:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def python_value(value: str) -> str:
    """``value`` as a Python literal: ``true`` -> ``True``, numbers as they are, words quoted."""
    if value.lower() in ("true", "false"):
        return value.capitalize()
    if _NUMBER.fullmatch(value) or _NUMBER_LIST.fullmatch(value) or (value[:1] in "\"'" and isinstance(_literal(value), str)):
        return value
    return json.dumps(value)


def json_value(value: str) -> str:
    if value.lower() in ("true", "false"):
        return value.lower()
    return value if _NUMBER.fullmatch(value) else json.dumps(value)


def yaml_value(value: str) -> str:
    if value.lower() in ("true", "false"):
        return value.lower()
    if _NUMBER.fullmatch(value) or (_PLAIN_YAML.fullmatch(value) and value.lower() not in _YAML_WORDS):
        return value
    return json.dumps(value)


def _keywords(value: str) -> bool:
    """Whether ``value`` is keyword arguments (``low_cpu_mem_usage=True, torch_dtype="auto"``)."""
    try:
        call = ast.parse(f"f({value})", mode="eval").body
    except SyntaxError:
        return False
    return isinstance(call, ast.Call) and not call.args and all(k.arg for k in call.keywords)


def _nested(items: list[tuple[str, str]]) -> dict[str, object]:
    tree: dict[str, object] = {}
    for key, value in items:
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            child = node.setdefault(part, {})
            node = child if isinstance(child, dict) else {}
        node[leaf] = value
    return tree


def _flow(tree: Mapping[str, object], quote: bool, top: bool = False) -> str:
    """``tree`` (leaves already written) as a JSON object, or a YAML flow mapping (``quote``: False)."""
    parts = []
    for k, v in tree.items():
        name = json.dumps(k) if quote else k
        parts.append(f"{name}: {_flow(v, quote) if isinstance(v, Mapping) else v}")
    if top and not quote and len(parts) == 1:
        return parts[0]  # one top-level key: a YAML mapping without braces
    return "{" + ", ".join(parts) + "}"


def _write(form: Form, items: list[tuple[str, str]]) -> str:
    if form.kind == "key-call":
        return "; ".join(f"{k}({python_value(v)})" for k, v in items)
    if form.kind == "call":
        args = [v if k == "from_pretrained" else f"{k.rsplit('.', 1)[-1]}={python_value(v)}" for k, v in items]
        return form.template.format(", ".join(args))
    quote = form.kind == "json"
    value = json_value if quote else yaml_value
    tree: dict[str, object] = _nested([(k, value(v)) for k, v in items])
    if form.prefix:
        tree = {form.prefix: tree}
    return _flow(tree, quote, top=True)


def program_of(product: str | None, engine: str | None, host: bool) -> str:
    """The program whose command line takes a remedy's flags."""
    if host:
        return HOST_PROGRAM
    return PROGRAMS.get(product or "") or PROGRAMS.get(engine or "") or ANY_PROGRAM


def code_lines(remedy: Remedy, product: str | None = None, engine: str | None = None) -> list[CodeLine]:
    """The remedy's changes as labelled code lines: the environment (``export``), the flags (the
    program's command-line words), then one line per place its settings go. Changes said in words,
    or settings whose place is not known, are left out (prose)."""
    host = remedy.id.startswith("host.")
    out: list[CodeLine] = []
    env = {k: v for k, v in remedy.env.items() if not is_words(v)}
    if env:
        text = "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        out.append(CodeLine(language="shell", where="environment", text=text, keys=list(env)))
    flags = {k: v for k, v in remedy.flags.items() if not is_words(v)}
    if flags:
        words = [k if v == "" else f"{k} {shlex.quote(v)}" for k, v in flags.items()]
        out.append(CodeLine(language="shell", where=program_of(product, engine, host), text=" ".join(words),
                            keys=list(flags)))
    groups: dict[Form, list[tuple[str, str]]] = {}
    for key, value in remedy.settings.items():
        form = form_of(key, product, host)
        if form is None:
            continue
        if key == "from_pretrained" and form.kind == "call":
            if not _keywords(value):
                continue
        elif not is_code_setting(key, value):
            continue
        groups.setdefault(form, []).append((key, value))
    for form, items in groups.items():
        out.append(CodeLine(language=form.language, where=form.where, text=_write(form, items),
                            keys=[k for k, _v in items]))
    return out
