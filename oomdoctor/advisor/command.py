"""The corrected launch command: the run's own command line with a remedy's flags applied.

Flags already on the line are replaced in place (``--flag value``, ``--flag=value``, the
``--flag_name`` spelling vLLM also accepts, and the short aliases), later duplicates are dropped,
missing ones are appended. Environment variables are prefixed as ``VAR=value``.
"""

from __future__ import annotations

import ast
import json
import re
import shlex

from oomdoctor.advisor.code_lines import is_words
from oomdoctor.report import Context, Remedy

#: short or alternative spellings of vLLM flags (research §5), and TGI's old input-limit name
ALIASES: dict[str, tuple[str, ...]] = {
    "--tensor-parallel-size": ("-tp",),
    "--pipeline-parallel-size": ("-pp",),
    "--quantization": ("-q",),
    "--gpu-memory-utilization": ("--device-memory-utilization",),
    # TGI 2.0+ keeps its 1.x name of the input limit but refuses it beside the new one
    "--max-input-tokens": ("--max-input-length",),
}

#: launch-arg keys that are not flags of ``vllm serve``
_NOT_FLAGS = {"model", "model_tag", "subparser", "dispatch_function", "func", "cli_args"}


def _spellings(flag: str) -> set[str]:
    names = {flag, "--" + flag[2:].replace("-", "_")}
    names.update(ALIASES.get(flag, ()))
    return names


def _takes_value(argv: list[str], i: int, engine: str | None, version: str | None) -> bool:
    """Whether ``argv[i]`` is followed by its value: as the engine's parser says where the generated
    data knows the flag (:func:`~oomdoctor.advisor.engine_args.takes_value`), else when the next
    token is not an option (a negative number is a value)."""
    if i + 1 >= len(argv):
        return False
    if engine is not None:
        from oomdoctor.advisor.engine_args import takes_value

        known = takes_value(engine, argv[i].split("=", 1)[0], version)
        if known is not None:
            return known
    nxt = argv[i + 1]
    return not nxt.startswith("-") or nxt[1:].replace(".", "", 1).isdigit()


def apply_flags(argv: list[str], flags: dict[str, str], version: str | None = None) -> list[str]:
    """``argv`` with every flag set to its value (``""``: a switch with no value). Whether a flag
    already there takes a value is read from the engine's parser data for ``version`` where it exists."""
    out = list(argv)
    engine = engine_of([a for a in argv if "=" not in a or a.startswith("-")])
    for flag, value in flags.items():
        names = _spellings(flag)
        new = [flag] if value == "" else [flag, value]
        placed = False
        i = 0
        result: list[str] = []
        while i < len(out):
            tok = out[i]
            name = tok.split("=", 1)[0]
            if name in names:
                width = 1 if "=" in tok or not _takes_value(out, i, engine, version) else 2
                if not placed:
                    result.extend(new)
                    placed = True
                i += width
                continue
            result.append(tok)
            i += 1
        if not placed:
            result.extend(new)
        out = result
    return out


def _value_tokens(engine: str, flag: str, value: str, version: str | None) -> list[str] | None:
    """``flag`` set to ``value`` (as a dump prints it) on a command line, or None when no
    command-line form gives that value: ``True`` is the switch, ``False`` its ``--no-`` form, a list
    several values, a dict JSON, ``None`` nothing at all."""
    from oomdoctor.advisor.engine_args import cli_value, flag_spec
    from oomdoctor.advisor.versions import flag_exists

    if value == "True":
        return [flag]
    if value == "False":
        spec = flag_spec(engine, flag, version)
        if spec is None or spec.kind == "value":
            return None
        if spec.kind == "optional":
            return [flag, "False"]
        no = "--no-" + flag[2:]
        return [no] if flag_exists(engine, no, version) else None
    if value in ("None", ""):
        return None  # set back to "no value": no flag writes that
    if value[:1] in "[{(":
        parsed = _literal(value)
        if isinstance(parsed, (list, tuple)) and parsed and all(isinstance(v, (str, int, float)) for v in parsed):
            return [flag, *(str(v) for v in parsed)]
        if isinstance(parsed, dict):
            return [flag, json.dumps(parsed, separators=(",", ":"))]
        return None
    return [flag, cli_value(value)]


def argv_from_launch_args(args: dict[str, str], version: str | None = None) -> list[str] | None:
    """``vllm serve MODEL --flag value ...`` rebuilt from a ``non-default args`` dump (what the user
    typed; never an engine-config dump, whose keys are not flags), or None when some argument has
    no faithful command-line form. Values take their command-line form (``bfloat16``, not
    ``torch.bfloat16``; a list as several values, a dict as JSON; False as ``--no-FLAG``); whether
    each flag exists at ``version`` is checked by :func:`corrected_command`."""
    from oomdoctor.advisor.engine_args import cli_value

    model = args.get("model_tag") or args.get("model")
    if not model or len(args) > 40:  # a full Namespace/config dump is not a command line
        return None
    argv = ["vllm", "serve", cli_value(model)]
    for key, value in args.items():
        if key in _NOT_FLAGS:
            continue
        tokens = _value_tokens("vllm", "--" + key.replace("_", "-"), value, version)
        if tokens is None:
            return None
        argv.extend(tokens)
    return argv


#: per engine: the dump's model key, and the program line a rebuilt command starts with
_DUMP_PROGRAMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "vllm": ("model", ("vllm", "serve")),
    "sglang": ("model_path", ("python", "-m", "sglang.launch_server", "--model-path")),
}


_ENUM_REPR = re.compile(r"<\w+\.\w+: (.+)>")


def _same_value(a: str, b: str) -> bool:
    """Two values as a dump prints them: equal as text, or as the Python values they spell (4 and
    4.0); an enum member's repr (``<ConfigFormat.AUTO: 'auto'>``) stands for its value."""
    m = _ENUM_REPR.fullmatch(a)
    if m:
        a = str(_literal(m.group(1)) or m.group(1))
    if a == b:
        return True
    x, y = _literal(a), _literal(b)
    return x is not None and y is not None and type(x) is not str and x == y


def argv_from_dump(engine: str | None, args: dict[str, str], version: str | None = None) -> list[str] | None:
    """The command rebuilt from a dump of every launch argument (vLLM's ``args: Namespace(...)``,
    SGLang's ``server_args=ServerArgs(...)``): only the arguments whose value differs from that
    version's default (the newest sampled release's for an unknown version) are kept. None when the
    engine has no such dump, an argument's default is not known (computed at run time, or the
    samples around the version disagree) while its value is set, or a value has no command-line form.

    SGLang fills some arguments itself after parsing (``mem_fraction_static``, ``chunked_prefill_size``
    from the GPU's size): a dump cannot tell those from typed ones, so they are kept as the run used them.
    """
    from oomdoctor.advisor.engine_args import UNKNOWN_DEFAULT, cli_value, default_of, flag_of_dest

    if engine not in _DUMP_PROGRAMS or not args:
        return None
    model_key, program = _DUMP_PROGRAMS[engine]
    model = args.get("model_tag") or args.get(model_key)
    if not model or model == "None":
        return None
    argv = [*program, cli_value(model)]
    for key, value in args.items():
        if key in _NOT_FLAGS or key == model_key:
            continue
        flag = flag_of_dest(engine, key)
        default = UNKNOWN_DEFAULT if flag is None else default_of(engine, flag, version)
        if _same_value(value, default) or (default == UNKNOWN_DEFAULT and value in ("None", "")):
            continue  # the default, or unset where the default is not known
        if flag is None or default == UNKNOWN_DEFAULT:
            return None
        tokens = _value_tokens(engine, flag, value, version)
        if tokens is None:
            return None
        argv.extend(tokens)
    return argv


def _literal(text: str) -> object:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def is_vllm_cli(argv: list[str]) -> bool:
    """``vllm serve ...`` or ``python -m vllm.entrypoints...``: every engine flag is accepted."""
    names = [a.rsplit("/", 1)[-1] for a in argv[:4]]
    return ("vllm" in names and "serve" in argv[:5]) or any(a.startswith("vllm.entrypoints") for a in argv[:4])


def is_sglang_cli(argv: list[str]) -> bool:
    """``python -m sglang.launch_server ...`` (or ``sglang serve``)."""
    names = [a.rsplit("/", 1)[-1] for a in argv[:4]]
    return any(a.startswith("sglang.launch_server") for a in argv[:4]) or ("sglang" in names and "serve" in argv[:5])


#: llama.cpp programs whose options are common/arg.cpp's
_LLAMACPP_PROGRAMS = frozenset({"llama-server", "llama-cli", "llama-perplexity", "llama-embedding"})


def engine_of(argv: list[str]) -> str | None:
    """The engine whose server ``argv`` starts (None: a user script or another program)."""
    if is_vllm_cli(argv):
        return "vllm"
    if is_sglang_cli(argv):
        return "sglang"
    if is_llamacpp_cli(argv):
        return "llama.cpp"
    if is_tgi_cli(argv):
        return "tgi"
    return None


def is_tgi_cli(argv: list[str]) -> bool:
    """``text-generation-launcher ...`` (TGI's launcher; its flags are the hand table's)."""
    return bool(argv) and argv[0].rsplit("/", 1)[-1] == "text-generation-launcher"


def is_llamacpp_cli(argv: list[str]) -> bool:
    """``llama-server ...`` / ``llama-cli ...`` (llama.cpp's programs, flags from common/arg.cpp)."""
    return bool(argv) and argv[0].rsplit("/", 1)[-1] in _LLAMACPP_PROGRAMS


def _engine_flags(argv: list[str]) -> list[str]:
    """The options of an engine command line: from ``vllm serve MODEL`` / ``-m module`` on."""
    if is_llamacpp_cli(argv):
        return argv[1:]  # llama.cpp's -m is the model file
    for i, tok in enumerate(argv):
        if tok == "-m" and i + 1 < len(argv):
            return argv[i + 2 :]
        if tok == "serve":
            rest = argv[i + 1 :]
            return rest[1:] if rest and not rest[0].startswith("-") else rest
    return argv[1:]


def _llamacpp_env(env_prefix: list[str], remedy: Remedy, version: str | None) -> list[str] | None:
    """The ``LLAMA_ARG_*`` assignments before a llama.cpp command, less those a remedy flag now sets
    (``-c`` supersedes ``LLAMA_ARG_CTX_SIZE``); None when one names no variable of that build."""
    from oomdoctor.advisor.engine_args import env_of
    from oomdoctor.advisor.versions import flag_exists

    superseded = {env_of("llama.cpp", flag) for flag in remedy.flags}
    kept = [a for a in env_prefix if a.split("=", 1)[0] not in superseded]
    if any(flag_exists("llama.cpp", a.split("=", 1)[0], version) is False for a in kept):
        return None
    return kept


def _changed(flags: dict[str, str]) -> list[str]:
    out: list[str] = []
    for flag, value in flags.items():
        out.extend([flag] if value == "" else [flag, value])
    return out


def corrected_command(context: Context, remedy: Remedy) -> str | None:
    """The full command with ``remedy`` applied, or None when the command, the change or any of
    its flags for this engine version is not known good (the renderers then show the flags alone).

    The command is the one the user typed: ``oomdoctor run``'s argv, a logged ``vllm serve`` /
    ``python -m ...`` line, vLLM's ``non-default args`` dump, or what differs from the defaults in
    an ``args: Namespace(...)`` / ``server_args=ServerArgs(...)`` dump (:func:`argv_from_dump`).
    """
    if not remedy.flags and not remedy.env:
        return None
    if remedy.settings:
        return None  # a model or script change: no command line expresses it
    if any(is_words(v) for v in [*remedy.flags.values(), *remedy.env.values()]):
        return None  # a value in words (not in the log): no command can carry it
    typed = bool(context.command)  # the user's own line ran: its flags are accepted by their version
    argv = list(context.command) if context.command else (
        argv_from_launch_args(context.typed_args, context.engine_version)
        or argv_from_dump(context.engine, context.dump_args, context.engine_version)
    )
    if not argv:
        return None
    env_prefix: list[str] = []
    while argv and "=" in argv[0] and not argv[0].startswith("-") and argv[0].split("=", 1)[0].isidentifier():
        if argv[0].split("=", 1)[0] not in remedy.env:
            env_prefix.append(argv[0])
        argv = argv[1:]
    engine = engine_of(argv)
    if engine == "llama.cpp" and env_prefix:
        kept = _llamacpp_env(env_prefix, remedy, context.engine_version)
        if kept is None:
            return None
        env_prefix = kept
    if engine is None:
        # a user script: only flags it already takes can be changed safely
        present = {tok.split("=", 1)[0] for tok in argv}
        if any(not (_spellings(flag) & present) for flag in remedy.flags):
            return None
    argv = apply_flags(argv, remedy.flags, context.engine_version)
    if engine == "tgi":
        # no generated data (crates.io is out of reach): each changed flag must be in the hand table
        from oomdoctor.advisor.versions import flag_exists

        if any(flag_exists("tgi", flag, context.engine_version) is not True for flag in remedy.flags):
            return None
    elif engine is not None:
        from oomdoctor.advisor.engine_args import check_argv

        check = list(_changed(remedy.flags)) if typed else _engine_flags(argv)
        if check_argv(engine, check, context.engine_version):
            return None
    env = [f"{k}={v}" for k, v in remedy.env.items()]
    return shlex.join(env_prefix + env + argv)
