"""``oomdoctor fit``: pre-flight verdict for a model on a GPU, with the flags that make it fit."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from oomdoctor.cli.errors import fail


def _size(n: int) -> str:
    from oomdoctor.units import format_size

    return ("−" if n < 0 else "") + format_size(abs(n))


def render_fit_text(res: Any) -> str:
    from oomdoctor.render.common import fits_label, remedy_snippet

    out = [
        f"{res.model} on {res.gpus if res.gpus > 1 else 1}× {res.gpu}"
        + (f" (tensor parallel {res.tensor_parallel_size})" if res.tensor_parallel_size > 1 else "")
        + f", max model len {res.max_model_len}, KV {res.kv_cache_dtype}",
        "",
    ]
    width = max(len(t) for t, _, _ in res.rows)
    for term, value, source in res.rows:
        out.append(f"  {term:<{width}}  {_size(value):>12}  {source}")
    out.append("")
    if res.fits:
        out.append(f"FITS: a {res.max_model_len}-token request needs {_size(res.kv_needed)} of KV cache; "
                   f"{_size(res.kv_budget)} is left (about {res.capacity_tokens} tokens in one request).")
        return "\n".join(out) + "\n"
    if res.kv_budget <= 0:
        out.append(f"DOES NOT FIT: nothing is left for the KV cache ({_size(res.kv_budget)}).")
    else:
        out.append(f"DOES NOT FIT: a {res.max_model_len}-token request needs {_size(res.kv_needed)} of KV cache, "
                   f"only {_size(res.kv_budget)} is left (vLLM would estimate {res.capacity_tokens} tokens).")
    if res.remedies:
        out.append("")
        out.append("What makes it fit, best first:")
        for r in res.remedies:
            snippet = remedy_snippet(r)
            out.append(f"{r.rank}. {r.title}  [{fits_label(r)}; {r.confidence} confidence]")
            if snippet:
                out.append(f"     {snippet}")
            if r.command:
                out.append(f"     $ {r.command}")
            if r.why:
                out.append(f"     why: {r.why}")
    return "\n".join(out) + "\n"


def register(app: typer.Typer) -> None:
    @app.command("fit", help="Pre-flight: will MODEL fit on GPU under vLLM? Budget table and the flags that make it fit.")
    def fit_command(
        model_config: Annotated[str | None, typer.Option("--model-config", help="The model's config.json.")] = None,
        model: Annotated[str | None, typer.Option("--model", help="A model from the built-in catalog.")] = None,
        gpu: Annotated[str | None, typer.Option("--gpu", help="GPU name, e.g. A10G, L4, A100-80GB, H100.")] = None,
        gpu_memory: Annotated[str | None, typer.Option("--gpu-memory", help="GPU memory, e.g. 24GiB.")] = None,
        gpus: Annotated[int, typer.Option("--gpus", help="GPUs available.")] = 1,
        tensor_parallel_size: Annotated[int, typer.Option("--tensor-parallel-size", "-tp")] = 1,
        max_model_len: Annotated[int | None, typer.Option("--max-model-len")] = None,
        dtype: Annotated[str | None, typer.Option("--dtype", help="auto, bfloat16, float16, float32.")] = None,
        kv_cache_dtype: Annotated[str | None, typer.Option("--kv-cache-dtype", help="auto or fp8.")] = None,
        gpu_memory_utilization: Annotated[float | None, typer.Option("--gpu-memory-utilization")] = None,
        vllm_version: Annotated[str | None, typer.Option("--vllm-version", help="vLLM version (flags and defaults).")] = None,
        enforce_eager: Annotated[bool, typer.Option("--enforce-eager")] = False,
        fmt: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
    ) -> int:
        from oomdoctor.advisor.catalog import find_gpu, find_model, gpu_names, load_config
        from oomdoctor.advisor.fit import fit
        from oomdoctor.units import SizeError, parse_size

        if fmt not in ("text", "json"):
            return fail(f"--format must be text or json, not {fmt!r}")
        if model_config:
            try:
                geo = load_config(model_config)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                return fail(f"cannot read {model_config}: {exc}")
        elif model:
            found = find_model(model)
            if found is None:
                return fail(f"{model!r} is not in the catalog; pass its config.json with --model-config")
            geo = found
        else:
            return fail("give --model-config config.json (or --model NAME from the catalog)")
        spec = find_gpu(gpu) if gpu else None
        if gpu and spec is None and not gpu_memory:
            return fail(f"unknown GPU {gpu!r}; known: {', '.join(gpu_names())} (or give --gpu-memory)")
        total = None
        if gpu_memory:
            try:
                total = parse_size(gpu_memory, "GiB")
            except SizeError:
                return fail(f"--gpu-memory: cannot read {gpu_memory!r}")
        if spec is None and total is None:
            return fail("give --gpu NAME or --gpu-memory SIZE")
        try:
            res = fit(geo, spec, model_name=model, total_bytes=total, gpus=max(gpus, tensor_parallel_size),
                      tensor_parallel_size=tensor_parallel_size, max_model_len=max_model_len, dtype=dtype,
                      kv_cache_dtype=kv_cache_dtype, utilization=gpu_memory_utilization, version=vllm_version,
                      enforce_eager=enforce_eager, model_config=model_config)
        except ValueError as exc:
            return fail(str(exc))
        if fmt == "json":
            print(json.dumps(res.to_dict(), indent=2, ensure_ascii=False))
        else:
            print(render_fit_text(res), end="")
        return 0 if res.fits else 1
