"""llama.cpp and ollama calculators, value by value at their boundaries, defaults and spellings.

Written against a whole-module mutation run of ``oomdoctor/advisor/remedies_ggml.py`` (issue 38 §4):
each row is worked out from the formula in its comment; moving a boundary by one step, flipping a
comparison or changing a default changes at least one row.
"""

from __future__ import annotations

from typing import Any

import pytest

from oomdoctor.advisor.registry import AdviceInput, calculator
from oomdoctor.report import Cause, Context, Finding, Location, Remedy

GiB = 2**30
MiB = 2**20


def _f(phase: str = "inference", rule: str = "test", cause: str | None = None, **figures: Any) -> Finding:
    return Finding(rule=rule, kind="ggml.x", engine="ggml", severity="error", phase=phase, title="t", message="m",
                   location=Location(line=1, end_line=1), figures=figures,
                   cause=Cause(id=cause, summary="s") if cause else None)


def _calc(rid: str, f: Finding, ctx: Context) -> Remedy | None:
    return calculator(rid)(AdviceInput(f, ctx, {}))


def _llama(**kw: Any) -> Context:
    return Context(engine="llama.cpp", **kw)


def _ollama(**kw: Any) -> Context:
    return Context(engine="ollama", **kw)


@pytest.mark.parametrize(("extra", "flags"), [
    # llama.cpp's default -ub is 512: half of it
    ({}, {"-ub": "256", "-b": "256"}),
    ({"llama_n_ubatch": 64}, {"-ub": "32", "-b": "32"}),  # the smallest batch still halved
    ({"llama_n_ubatch": 63}, None),
])
def test_ubatch_rows(extra: dict[str, Any], flags: dict[str, str] | None) -> None:
    r = _calc("ggml.ubatch-size", _f(), _llama(extra=extra))
    assert (r.flags if r else None) == flags
    if r is not None:
        assert f"grows with n_ubatch ({int(flags['-ub']) * 2})" in r.why


@pytest.mark.parametrize(("extra", "settings", "default"), [
    # ollama's default num_batch is 512 (api.DefaultOptions)
    ({}, {"num_batch": "256"}, True),
    ({"ollama_num_batch": 64}, {"num_batch": "32"}, False),
    ({"ollama_num_batch": 63}, None, False),
])
def test_ollama_num_batch_rows(extra: dict[str, Any], settings: dict[str, str] | None, default: bool) -> None:
    r = _calc("ollama.num-batch", _f(), _ollama(extra=extra))
    assert (r.settings if r else None) == settings
    if r is not None:
        assert ("512 unless set" in r.why) is default


@pytest.mark.parametrize(("n_batch", "flags"), [(512, None), (513, {"-b": "512"}), (1024, {"-b": "512"})])
def test_context_pool_batch_back_to_512(n_batch: int, flags: dict[str, str] | None) -> None:
    r = _calc("ggml.n-batch-pool", _f(rule="ggml.context-pool-exhausted"), _llama(extra={"n_batch": n_batch}))
    assert (r.flags if r else None) == flags


@pytest.mark.parametrize(("version", "fa"), [
    ("b5500", ""),  # -fa a switch up to b5590
    ("b6500", "on"),  # -fa on|off|auto from b6431
])
def test_flash_attn_spelling_by_build(version: str, fa: str) -> None:
    r = _calc("ggml.flash-attn", _f(), _llama(engine_version=version))
    assert r is not None and r.flags == {"-fa": fa}


@pytest.mark.parametrize(("req", "offered"), [
    # q8_0 saves 1 GiB × (1 − 8.5/16) = 480 MiB; pointless only below a tenth of the failed request
    (4800 * MiB, True),
    (4800 * MiB + 1, False),
])
def test_kv_type_against_a_tenth_of_the_request(req: int, offered: bool) -> None:
    r = _calc("ggml.kv-cache-type", _f(requested_bytes=req), _llama(kv_cache_bytes=GiB))
    if offered:
        assert r is not None and r.saves_bytes == 480 * MiB
        assert r.flags == {"--cache-type-k": "q8_0", "--cache-type-v": "q8_0", "-fa": "on"}
    else:
        assert r is None


@pytest.mark.parametrize(("n_ctx", "value", "title"), [
    (512, "256", "Halve the context to 256 tokens (num_ctx)"),  # 256, the smallest context offered
    (511, None, None),
    (8192, "4096", "Halve the context to 4096 tokens (num_ctx)"),
])
def test_ollama_num_ctx_halved(n_ctx: int, value: str | None, title: str | None) -> None:
    r = _calc("ollama.num-ctx", _f(), _ollama(max_model_len=n_ctx))
    assert (None if r is None else (r.settings, r.title)) == (None if value is None else ({"num_ctx": value}, title))


def test_ollama_num_ctx_cut_by_the_failed_request() -> None:
    """2 GiB of KV cache over 8192 tokens is 256 KiB a token: a failed 1 GiB needs 4096 fewer."""
    f = _f(requested_bytes=GiB, buffer_type="CUDA0")
    r = _calc("ollama.num-ctx", f, _ollama(max_model_len=8192, kv_cache_bytes=2 * GiB,
                                           extra={"llama_kv_buffer_type": "CUDA0"}))
    assert r is not None and (r.settings, r.saves_bytes) == ({"num_ctx": "4096"}, GiB)
    assert r.title == "Lower the context to 4096 tokens (num_ctx)"


@pytest.mark.parametrize(("req", "flags", "saves"), [
    # 1 MiB a token; 768 MiB failed: 1024 − 768 = 256 tokens, the smallest cut context kept
    (768 * MiB, {"-c": "256"}, 768 * MiB),
    # one byte more needs 769 tokens: 255 rounds to 0, so the context is halved instead
    (768 * MiB + 1, {"-c": "512"}, 512 * MiB),
])
def test_ctx_cut_down_to_256(req: int, flags: dict[str, str], saves: int) -> None:
    f = _f(requested_bytes=req, buffer_type="CUDA0")
    r = _calc("ggml.ctx-size", f, _llama(max_model_len=1024, kv_cache_bytes=GiB, extra={"llama_kv_buffer_type": "CUDA0"}))
    assert r is not None and (r.flags, r.saves_bytes) == (flags, saves)


def test_unsized_layers_say_where_ollama_takes_num_gpu() -> None:
    f = _f(phase="weights-load", cause="weights-exceed-device")
    ollama = _calc("ollama.num-gpu", f, _ollama())
    llama = _calc("ggml.n-gpu-layers", f, _llama())
    assert ollama is not None and ollama.settings == {
        "num_gpu": "fewer than the layers offloaded now (ollama ps shows them)"} and ollama.why.endswith(
        "Set it with PARAMETER num_gpu in a Modelfile or options.num_gpu in the API request.")
    assert llama is not None and llama.flags == {} and llama.why.endswith("set -ngl below the layers offloaded now.")


@pytest.mark.parametrize(("extra", "assumed"), [
    # n_layer 32 + the output layer: 34 offloaded cannot be, so 33; half of 33 is 16
    ({"llama_n_layer": 32, "llama_offloaded_layers": 34}, False),
    ({"llama_n_layer": 32}, True),  # not in the log: every layer + output assumed
    ({"llama_n_layer": 32, "llama_offloaded_layers": 33}, False),
])
def test_ngl_clamped_to_layers_plus_output(extra: dict[str, Any], assumed: bool) -> None:
    r = _calc("ggml.n-gpu-layers", _f(), _llama(extra=extra))
    assert r is not None and r.flags == {"-ngl": "16"}
    assert r.why.startswith("Half of the 33 layers offloaded now")
    assert ("This assumes all 32 layers + output were offloaded" in r.why) is assumed


def test_ollama_num_gpu_from_the_repeating_weights() -> None:
    """32 GiB of repeating weights over 33 − 1 layers = 1 GiB a layer; (5 GiB − 1 GiB) // 1 GiB = 4."""
    extra = {"ollama_layers_offload": 33, "ollama_layers_model": 33, "ollama_weights_repeating_bytes": 32 * GiB,
             "ollama_memory_available_bytes": 5 * GiB}
    r = _calc("ollama.num-gpu", _f(), _ollama(extra=extra))
    assert r is not None and (r.settings, r.fits) == ({"num_gpu": "4"}, True)
    # one layer in the model: no per-layer size from the repeating weights, half the offloaded
    # two layers (one repeating): 1 GiB a layer, 4 fit
    extra = {"ollama_layers_offload": 10, "ollama_layers_model": 2, "ollama_weights_repeating_bytes": GiB,
             "ollama_memory_available_bytes": 5 * GiB}
    r = _calc("ollama.num-gpu", _f(), _ollama(extra=extra))
    assert r is not None and (r.settings, r.fits) == ({"num_gpu": "4"}, True)
    extra = {"ollama_layers_offload": 10, "ollama_layers_model": 1, "ollama_weights_repeating_bytes": 32 * GiB}
    r = _calc("ollama.num-gpu", _f(), _ollama(extra=extra))
    assert r is not None and (r.settings, r.fits) == ({"num_gpu": "5"}, None)


@pytest.mark.parametrize(("parallel", "value", "why"), [
    (None, "4096", "The runner was started with n_ctx = 8192; KV cache and compute buffers grow with it. "
                   "Set PARAMETER num_ctx or options.num_ctx."),
    # 8192 tokens over 2 slots: each slot's context halved to 2048
    (2, "2048", "The runner was started with n_ctx = 8192 (2 parallel slots × 4096); KV cache and compute "
                "buffers grow with it. Set PARAMETER num_ctx or options.num_ctx."),
])
def test_ollama_num_ctx_per_slot(parallel: int | None, value: str, why: str) -> None:
    r = _calc("ollama.num-ctx", _f(), _ollama(max_model_len=8192, extra={"ollama_num_parallel": parallel} if parallel else {}))
    assert r is not None and (r.settings, r.why) == ({"num_ctx": value}, why)


@pytest.mark.parametrize(("parallel", "offered"), [(1, False), (2, True), (None, True)])
def test_ollama_num_parallel_above_one(parallel: int | None, offered: bool) -> None:
    r = _calc("ollama.num-parallel", _f(), _ollama(extra={"ollama_num_parallel": parallel} if parallel else {}))
    assert (r.env if r else None) == ({"OLLAMA_NUM_PARALLEL": "1"} if offered else None)


def test_ollama_kv_type_saving_and_phase() -> None:
    r = _calc("ollama.kv-cache-type", _f(requested_bytes=GiB), _ollama(kv_cache_bytes=GiB))
    assert r is not None and r.saves_bytes == 480 * MiB
    assert r.env == {"OLLAMA_KV_CACHE_TYPE": "q8_0", "OLLAMA_FLASH_ATTENTION": "1"}
    assert _calc("ollama.kv-cache-type", _f(phase="weights-load"), _ollama(kv_cache_bytes=GiB)) is None
    assert _calc("ggml.flash-attn", _f(phase="weights-load"), _llama()) is None


@pytest.mark.parametrize(("command", "ub"), [
    (["llama-server", "-ub", "128"], "64"),
    (["llama-server", "--ubatch-size=128"], "64"),
    (["llama-server", "-m", "x", "-ub", "128", "-c", "4"], "64"),
    (["llama-server", "-ub"], "256"),  # no value after the flag: the default 512
])
def test_ubatch_from_the_command_line(command: list[str], ub: str) -> None:
    r = _calc("ggml.ubatch-size", _f(), _llama(command=command))
    assert r is not None and r.flags == {"-ub": ub, "-b": ub}


def test_ubatch_saves_half_the_failed_buffer() -> None:
    r = _calc("ggml.ubatch-size", _f(requested_bytes=GiB), _llama())
    assert r is not None and r.saves_bytes == GiB // 2


@pytest.mark.parametrize(("rule", "flags"), [
    ("llama.server-kv-cache-full", {"-c": "8192"}),
    ("llama.server-kv-cache-retry", {"-c": "8192"}),
    ("other", None),
])
def test_ctx_raise_only_when_the_kv_cache_is_full(rule: str, flags: dict[str, str] | None) -> None:
    r = _calc("ggml.ctx-size.raise", _f(rule=rule), _llama(max_model_len=4096))
    assert (r.flags if r else None) == flags


def test_pool_batch_only_for_the_pool_rule() -> None:
    assert _calc("ggml.n-batch-pool", _f(rule="other"), _llama(extra={"n_batch": 1024})) is None


@pytest.mark.parametrize(
    ("rule", "n_batch", "flags"),
    [
        # the GGML-era context pool overflowed by a stated batch above 512: -b 512 is the remedy
        # (ggml.n-batch-pool), not -ub
        ("ggml.context-pool-exhausted", 1024, None),
        # the pool, with no batch above 512 stated: -ub stays offered (halving the default 512)
        ("ggml.context-pool-exhausted", 512, {"-ub": "256", "-b": "256"}),
        ("ggml.context-pool-exhausted", None, {"-ub": "256", "-b": "256"}),
        # another failure with a large batch: -ub as ever
        ("test", 1024, {"-ub": "256", "-b": "256"}),
    ],
)
def test_ubatch_leaves_a_stated_pool_batch_to_n_batch_pool(rule: str, n_batch: int | None,
                                                            flags: dict[str, str] | None) -> None:
    ctx = _llama(extra={"n_batch": n_batch} if n_batch else {})
    r = _calc("ggml.ubatch-size", _f(rule=rule), ctx)
    assert (r.flags if r else None) == flags
