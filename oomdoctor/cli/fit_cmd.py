"""``oomdoctor fit``: pre-flight verdict for a model on a GPU, with the flags that make it fit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from oomdoctor.cli import complete
from oomdoctor.cli.diagnose import LANG_HELP
from oomdoctor.cli.errors import fail
from oomdoctor.i18n import N_, _, current_lang, resolve_lang, use_lang


def _size(n: int) -> str:
    from oomdoctor.units import format_size

    return ("−" if n < 0 else "") + format_size(abs(n))


def render_fit_text(res: Any, width: int | None = None) -> str:
    """The budget table, the verdict and the remedies, laid out like the post-mortem text: prose
    wrapped to the terminal with hanging indents, flags and commands whole on their own lines."""
    from oomdoctor.render.common import confidence_label, fits_label, setting_lines
    from oomdoctor.render.text import BODY, CODE, REMEDY, TextLayout, remedy_code, terminal_width

    out = TextLayout(terminal_width(width), False)
    on = _("{model} on {gpus}× {gpu}").format(model=res.model, gpus=res.gpus if res.gpus > 1 else 1, gpu=res.gpu)
    if res.tensor_parallel_size > 1:
        on += _(" (tensor parallel {tp})").format(tp=res.tensor_parallel_size)
    on += _(", max model len {length}, KV {dtype}").format(length=res.max_model_len, dtype=res.kv_cache_dtype)
    out.prose(on, "", "  ")
    if res.plans:
        tried = ("、" if current_lang() == "ja" else "; ").join(
            _("TP {tp}: fits").format(tp=t) if ok else _("TP {tp}: room for {tokens} tokens").format(tp=t, tokens=cap)
            for t, ok, cap in res.plans)
        out.prose(_("Plan for {gpus} GPUs ({tried}):").format(gpus=res.gpus, tried=tried), "", "  ")
        out.code("$ " + res.command, CODE)
    out.lines.append("")
    budget_table(res.rows, out)
    out.lines.append("")
    if res.fits:
        if res.concurrency < 2:
            fits = _("FITS: 1 full-length request at a time ({length} tokens, {needed} of KV cache; the pool holds {budget}).")
        else:
            fits = _(
                "FITS: {count} full-length requests at once ({length} tokens each, {needed} of KV cache each; "
                "the pool holds {budget})."
            )
        # with two decimals, as vLLM prints "Maximum concurrency for N tokens per request: C.CCx"
        out.prose(fits.format(count=f"{res.concurrency:.2f}", length=res.max_model_len, needed=_size(res.kv_needed),
                 budget=_size(res.kv_budget)), "", "  ")
        return "".join(line + "\n" for line in out.lines)
    if res.engine == "sglang" and res.kv_tokens > 0:
        out.prose(_(
            "DOES NOT FIT: SGLang starts, but its KV pool holds {tokens} tokens, less than one {length}-token "
            "request ({needed} of KV cache; the pool is {budget})."
        ).format(tokens=res.kv_tokens, length=res.max_model_len, needed=_size(res.kv_needed),
                 budget=_size(res.kv_budget)), "", "  ")
    elif res.uncertain:
        out.prose(_(
            "UNCERTAIN: as modelled, one {length}-token request needs {needed} of KV cache and only {budget} is "
            "left; but that rests on a term of the activation peak no log confirms: {term}. With the text model's "
            "own peak ({floor}) instead, {floor_budget} would be left, enough. One start-up settles it: vLLM prints "
            "\"PyTorch activation peak memory takes …\"."
        ).format(length=res.max_model_len, needed=_size(res.kv_needed), budget=_size(res.kv_budget),
                 term=res.uncertain, floor=_size(res.activation_floor or 0),
                 floor_budget=_size(res.kv_budget_floor or 0)), "", "  ")
    elif res.kv_budget <= 0:
        out.prose(_("DOES NOT FIT: nothing is left for the KV cache ({budget}).").format(budget=_size(res.kv_budget)),
                  "", "  ")
    else:
        out.prose(_(
            "DOES NOT FIT: one {length}-token request needs {needed} of KV cache; only {budget} is left, "
            "room for {tokens} tokens."
        ).format(length=res.max_model_len, needed=_size(res.kv_needed), budget=_size(res.kv_budget),
                 tokens=res.capacity_tokens), "", "  ")
    if res.remedies:
        out.lines.append("")
        out.lines.append(_("What makes it fit, best first:"))
        for r in res.remedies:
            number = f"{r.rank}. "
            out.prose(number + r.title, BODY, BODY + " " * len(number))
            out.prose(f"{fits_label(r)} · {confidence_label(r.confidence)}", REMEDY)
            remedy_code(r, out)
            for line in setting_lines(r):
                out.prose(line, REMEDY, REMEDY + "  ")
            if r.why:
                out.labelled(_("why:"), r.why, REMEDY)
    return "".join(line + "\n" for line in out.lines)


#: the narrowest the budget table's third column (where each figure comes from) may be; narrower,
#: each row's note goes on the lines below its term instead
NOTE_MIN = 30


def budget_table(rows: list[tuple[str, int, str]], out: Any) -> None:
    """The budget rows (term, bytes, where the figure comes from) as three columns, the note
    wrapped in its own column; when the terms leave it fewer than :data:`NOTE_MIN` cells (long
    Japanese terms at 80 columns), each note goes under its term, indented, across the full width.
    A term is never split."""
    from oomdoctor.render.text import BODY, cell_len, pad_cells

    term_w = max(cell_len(row[0]) for row in rows)
    head_w = len(BODY) + term_w + 2 + 10 + 2
    stacked = out.width - head_w < NOTE_MIN
    for term, value, source in rows:
        head = f"{BODY}{pad_cells(term, term_w)}  {_size(value):>10}"
        if stacked:
            out.lines.append(head)
            out.prose(source, BODY + "    ")
        else:
            out.prose(source, head + "  ", " " * head_w)


#: ``--gpu-memory`` units as written: GB/MB/TB decimal, GiB/MiB/TiB binary; a bare number is GiB
MEMORY_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
                "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_memory(text: str) -> int:
    """``24GB`` -> 24 000 000 000, ``24GiB`` -> 24 × 2**30, ``24`` -> 24 GiB; ValueError otherwise."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if not m:
        raise ValueError(text)
    unit = (m.group(2) or "GiB").lower()
    if unit not in MEMORY_UNITS:
        raise ValueError(text)
    return round(float(m.group(1)) * MEMORY_UNITS[unit])


def list_gpus() -> str:
    """The GPU catalog, one card a line: name, memory, whether the figure is usable or nominal,
    and where it comes from (in the language in force; names and cases stay as they are)."""
    from oomdoctor.advisor.catalog import gpus
    from oomdoctor.render.text import cell_len, pad_cells
    from oomdoctor.units import format_size

    rows = [
        (g.name, format_size(g.memory_bytes), _("usable") if g.reported else _("nominal"),
         f"{g.reported_by}, {g.case} ({g.source})" if g.reported
         else _("sold as {size} GB").format(size=f"{g.nominal_gib:g}"))
        for g in gpus()
    ]
    width = max(len(r[0]) for r in rows)
    kinds = max(7, *(cell_len(r[2]) for r in rows))
    return "".join(f"{n:<{width}}  {m:>10}  {pad_cells(kind, kinds)}  {src}\n" for n, m, kind, src in rows)


def list_models() -> str:
    """The model catalog, one model a line: name, parameters, layers and the config.json it is
    copied from (in the language in force)."""
    from oomdoctor.advisor.catalog import models
    from oomdoctor.render.text import cell_len

    rows = [(g.name, f"{g.params}B" if g.params else "?", _("{layers} layers").format(layers=g.layers),
             g.source_text()) for g in models()]
    width = max(len(r[0]) for r in rows)
    layers_w = max(10, *(cell_len(r[2]) for r in rows))
    return "".join(f"{n:<{width}}  {p:>7}  {' ' * (layers_w - cell_len(layers))}{layers}  {src}\n"
                   for n, p, layers, src in rows)


def register(app: typer.Typer) -> None:
    @app.command(
        "fit",
        help=N_(
            "Pre-flight: will a model fit on a GPU under vLLM (or SGLang)? Budget table, how many full-length requests "
            "fit at once, and the flags that make it fit. Exit status: 0 fits, 1 does not fit, 2 usage error, 3 "
            "uncertain (it does not fit only on a term no log confirms)."
        ),
    )
    def fit_command(
        model_config: Annotated[
            str | None, typer.Option("--model-config", help=N_("The model's config.json."), metavar="PATH")
        ] = None,
        model: Annotated[
            str | None, typer.Option("--model", help=N_(
                "A model directory (config.json + safetensors), a model from the catalog (see --list-models), "
                "or org/name read from the Hugging Face Hub when online."), metavar="NAME", autocompletion=complete.models)
        ] = None,
        gpu: Annotated[
            str | None, typer.Option("--gpu", help=N_("GPU name, e.g. A10G, L4, H100 (see --list-gpus)."), metavar="NAME",
                                autocompletion=complete.gpus)
        ] = None,
        gpu_memory: Annotated[
            str | None,
            typer.Option("--gpu-memory", help=N_("Memory per GPU: 24GB is decimal, 24GiB binary (bare: GiB)."),
                         metavar="SIZE"),
        ] = None,
        gpus: Annotated[int, typer.Option("--gpus", help=N_("GPUs available."), metavar="N")] = 1,
        tensor_parallel_size: Annotated[
            int | None,
            typer.Option("--tensor-parallel-size", "-tp",
                         help=N_("Tensor-parallel size (default with --gpus N: the best one up to N)."), metavar="N"),
        ] = None,
        max_model_len: Annotated[
            int | None, typer.Option("--max-model-len", help=N_("Context length (default: the model's)."), metavar="TOKENS")
        ] = None,
        dtype: Annotated[
            str | None, typer.Option("--dtype", help=N_("auto, bfloat16, float16, float32."), metavar="DTYPE",
                                autocompletion=complete.choices("auto", "bfloat16", "float16", "float32"))
        ] = None,
        kv_cache_dtype: Annotated[
            str | None, typer.Option("--kv-cache-dtype", help=N_("auto or fp8."), metavar="DTYPE",
                                autocompletion=complete.choices("auto", "fp8"))
        ] = None,
        gpu_memory_utilization: Annotated[
            float | None, typer.Option("--gpu-memory-utilization", help=N_("vLLM's budget fraction."), metavar="FRACTION")
        ] = None,
        vllm_version: Annotated[
            str | None, typer.Option("--vllm-version", help=N_("vLLM version (flags and defaults)."), metavar="VERSION")
        ] = None,
        enforce_eager: Annotated[bool, typer.Option("--enforce-eager", help=N_("No CUDA graphs."))] = False,
        max_num_batched_tokens: Annotated[
            int | None, typer.Option("--max-num-batched-tokens", help=N_("Tokens per profile/prefill batch."),
                                     metavar="TOKENS")
        ] = None,
        max_num_seqs: Annotated[
            int | None, typer.Option("--max-num-seqs", help=N_("Sequences per batch (sampler warm-up rows)."),
                                     metavar="N")
        ] = None,
        quantization: Annotated[
            str | None, typer.Option("--quantization", "-q", help=N_("Quantize an unquantized checkpoint at load (fp8)."),
                                     metavar="METHOD")
        ] = None,
        enable_chunked_prefill: Annotated[
            bool | None, typer.Option("--enable-chunked-prefill/--no-enable-chunked-prefill",
                                      help=N_("V0 chunked prefill (V1: always on)."))
        ] = None,
        engine: Annotated[
            str, typer.Option("--engine", help=N_("vllm or sglang (SGLang's --mem-fraction-static budget)."),
                              metavar="ENGINE", autocompletion=complete.choices("vllm", "sglang"))
        ] = "vllm",
        mem_fraction_static: Annotated[
            float | None, typer.Option("--mem-fraction-static",
                                       help=N_("SGLang's static fraction: weights + KV pool (default: SGLang's)."),
                                       metavar="FRACTION")
        ] = None,
        sglang_version: Annotated[
            str | None, typer.Option("--sglang-version", help=N_("SGLang version (its default fraction)."),
                                     metavar="VERSION")
        ] = None,
        chunked_prefill_size: Annotated[
            int | None, typer.Option("--chunked-prefill-size", help=N_("SGLang's prefill chunk (its default fraction)."),
                                     metavar="TOKENS")
        ] = None,
        fmt: Annotated[str, typer.Option("--format", "-f", help=N_("text or json."), metavar="FORMAT",
                                         autocompletion=complete.choices("text", "json"))] = "text",
        show_gpus: Annotated[bool, typer.Option("--list-gpus", help=N_("List the GPUs of the catalog."))] = False,
        show_models: Annotated[bool, typer.Option("--list-models", help=N_("List the models of the catalog."))] = False,
        lang: Annotated[str | None, typer.Option("--lang", help=LANG_HELP, metavar="LANG",
                                                 autocompletion=complete.langs)] = None,
    ) -> int:
        try:
            chosen = resolve_lang(lang)  # --lang, else OOMDOCTOR_LANG, else the locale
        except ValueError as exc:
            return fail(f"--lang: {exc}")
        with use_lang(chosen):
            from oomdoctor.advisor.catalog import (
                config_model_name,
                find_gpu,
                find_model,
                gpu_names,
                gpu_sizes,
                load_config,
                load_hub,
                repo_name,
            )
            from oomdoctor.advisor.fit import fit, plan

            if show_gpus or show_models:
                print((list_gpus() if show_gpus else "") + (list_models() if show_models else ""), end="")
                return 0
            if fmt not in ("text", "json"):
                return fail(_("--format must be text or json, not {value}").format(value=repr(fmt)))
            if engine not in ("vllm", "sglang"):
                return fail(_("--engine must be vllm or sglang, not {value}").format(value=repr(engine)))
            if model_config:
                try:
                    geo = load_config(model_config)
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    return fail(_("cannot read {path}: {error}").format(path=model_config, error=exc))
                name = model or config_model_name(model_config)
            elif model and Path(model).is_dir():
                try:
                    geo = load_config(model)  # config.json + the safetensors headers' exact weight bytes
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    return fail(_("cannot read {path}: {error}").format(path=model, error=exc))
                name = config_model_name(Path(model) / "config.json") or model
            elif model and find_model(model) is None and "/" in model and (hub := load_hub(model)) is not None:
                geo, name = hub, model
            elif model:
                found = find_model(model)
                if found is None:
                    return fail(_(
                        "{model} is not in the catalog (see --list-models); pass its config.json with --model-config"
                    ).format(model=repr(model)))
                geo = found
                name = repo_name(geo, model)
            else:
                return fail(_("give --model-config config.json (or --model NAME from the catalog)"))
            spec = find_gpu(gpu) if gpu else None
            if gpu and spec is None and not gpu_memory:
                return fail(_("unknown GPU {gpu}; known: {known} (or give --gpu-memory)").format(
                    gpu=repr(gpu), known=", ".join(gpu_names())))
            sizes = gpu_sizes(gpu) if gpu and spec is not None and not gpu_memory else []
            if len(sizes) > 1 and spec is not None:  # "A100" is sold as 40 GB and 80 GB: say which one the plan assumes
                import sys

                print(_("oomdoctor: --gpu {gpu} is sold in several sizes ({sizes}); planning for {chosen}. "
                        "Name the size to plan for another.").format(gpu=gpu, sizes=", ".join(sizes), chosen=spec.name),
                      file=sys.stderr)
            total = None
            if gpu_memory:
                try:
                    total = parse_memory(gpu_memory)
                except ValueError:
                    return fail(_("--gpu-memory: cannot read {value} (e.g. 24GB, 24GiB)").format(value=repr(gpu_memory)))
            if spec is None and total is None:
                return fail(_("give --gpu NAME or --gpu-memory SIZE"))
            if engine == "sglang":
                from oomdoctor.advisor.sglang_fit import fit_sglang, plan_sglang

                args: dict[str, Any] = dict(
                    total_bytes=total, max_model_len=max_model_len, dtype=dtype, kv_cache_dtype=kv_cache_dtype,
                    mem_fraction_static=mem_fraction_static, version=sglang_version,
                    chunked_prefill_size=chunked_prefill_size, model_name=name, quantization=quantization)
                try:
                    if gpus > 1 and tensor_parallel_size is None:
                        res = plan_sglang(geo, spec, gpus=gpus, **args)
                    else:
                        tp = tensor_parallel_size or 1
                        res = fit_sglang(geo, spec, gpus=max(gpus, tp), tensor_parallel_size=tp, **args)
                except ValueError as exc:
                    return fail(str(exc))
                print(json.dumps(res.to_dict(), indent=2, ensure_ascii=False) if fmt == "json" else render_fit_text(res),
                      end="\n" if fmt == "json" else "")
                return 0 if res.fits else 1
            try:
                common: dict[str, Any] = dict(
                    model_name=name, total_bytes=total, dtype=dtype, kv_cache_dtype=kv_cache_dtype,
                    utilization=gpu_memory_utilization, version=vllm_version, enforce_eager=enforce_eager,
                    model_config=model_config, max_num_batched_tokens=max_num_batched_tokens,
                    max_num_seqs_given=max_num_seqs, enable_chunked_prefill=enable_chunked_prefill,
                    quantization=quantization)
                if gpus > 1 and tensor_parallel_size is None:
                    res = plan(geo, spec, gpus=gpus, max_model_len=max_model_len, **common)
                else:
                    tp = tensor_parallel_size or 1
                    res = fit(geo, spec, gpus=max(gpus, tp), tensor_parallel_size=tp, max_model_len=max_model_len,
                              **common)
            except ValueError as exc:
                return fail(str(exc))
            if fmt == "json":
                print(json.dumps(res.to_dict(), indent=2, ensure_ascii=False))
            else:
                print(render_fit_text(res), end="")
            return 0 if res.fits else 3 if res.uncertain else 1
