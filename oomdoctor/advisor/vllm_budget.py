"""The non-KV terms of vLLM's start-up budget that a log does not print: activation peak of the
profile run, non-torch memory, and the profile's batch shape, per version and architecture.

Every figure is a named formula over the model's shapes, or a measured value with its case
(research/vllm-startups/cases.json, copied to tests/data/vllm_startups/):

* **profile batch** (research/vllm-memory-model.md §5): ``max_num_batched_tokens`` defaults to
  ``max(max_model_len, 2048)`` in V0 without chunked prefill, 2048 with it (512 before 0.6.0; on by
  default for ``max_model_len`` > 32768 from 0.5.3); V1 (0.8.0+) 2048 for the API server, 8192 on
  GPUs of 70 GiB or more that are not A100.
* **activation peak** = max(forward pass, sampler warm-up), divided by tensor parallelism where
  the tensors are split:

  - dense MLP: ``tokens × (3·I/tp + 3·H) × 2 B``: the gate_up output (2I) and the SiluAndMul
    output (I) live together, with the residual, the normed input and the down output (3H).
    Checked on cases B1/B2 (vLLM 0.6.4, Llama-3.1-8B, 20000 and 29000 tokens: 2.06 and 2.99 GiB
    against 2.07 and 2.99 printed).
  - MoE: ``min(tokens, 65536) × top_k × (max(2I/tp, H) + I/tp) × 2 B + tokens × 3H × 2 B``:
    fused_moe's ``cache13`` (M·top_k·max(N, K)) and ``intermediate_cache2`` (M·top_k·N/2), chunked
    at VLLM_FUSED_MOE_CHUNK_SIZE = 65536 (model_executor/layers/fused_moe/fused_moe.py@v0.10.1).
  - sampler warm-up (``_dummy_sampler_run`` sets top-k and top-p), ``min(max_num_seqs, tokens) ×
    vocab`` logits at a cost per logit that depends on the version:

    * before 0.17.0, 38 B: ``apply_top_k_top_p`` sorts the vocabulary
      (v1/sample/ops/topk_topp_sampler.py@v0.11.0, @v0.12.0; V0's sampler sorts too). Live at the
      sort: the bf16 logits of ``compute_logits`` (2 B), their fp32 copy (4), the sorted values (4)
      and int64 indices (8), the int64 index input the segmented sort builds (8) and cub's alternate
      key and value buffers (4 + 8). Checked on case B9 (0.10.2, 256 rows × 151936: 1.38 GiB against
      1.40 printed), B3/B4 (0.6.5: 1.16 against 1.26) and on what gpt-oss-120b leaves for the KV
      cache (B10, B11: 7.4 GiB of sampler). FlashInfer's sampler, which sorts nothing, was the
      default only where FlashInfer was installed (an extra up to 0.11; opt-in
      ``VLLM_USE_FLASHINFER_SAMPLER=1`` from 0.12).
    * from 0.17.0, 16 B: ``apply_top_k_top_p_triton`` for 8 rows or more
      (v1/sample/ops/topk_topp_triton.py, new in 0.17.0; still so in 0.34.0), no sort. Checked on
      cases A1/A4 (0.19.0, 1024 rows: 1.96 and 2.32 GiB against 1.89 and 2.21 printed). Also the
      figure for an unknown version.
* **all-reduce inputs held back** (vLLM 0.2.5 only, TP > 1): 0.2.5's profiler subtracts
  ``total − free`` after the profile run (worker.py@v0.2.5; 0.2.4 subtracted
  ``torch.cuda.max_memory_allocated()``), which counts the blocks PyTorch's caching allocator
  reserves. ``torch.distributed.all_reduce`` records the NCCL stream on its input, so the input's
  block is not reused until the GPU reaches that all-reduce; the CPU runs far ahead of the GPU in
  the profile run and every all-reduce input of the pass stays reserved: the vocab-parallel
  embedding's and two per layer (attention and MLP outputs), ``(2·L + 1) × tokens × H × 2 B``.
  0.2.6 set ``TORCH_NCCL_AVOID_RECORD_STREAMS=1`` in ``Worker.init_device`` with the comment
  "torch.distributed.all_reduce does not free the input tensor until the synchronization point.
  This causes the memory usage to grow as the number of all_reduce calls increases" (worker.py@v0.2.6,
  still so in 0.6.3). Checked on case B6 (Llama-2-70B at TP 4, 4096 tokens: 10.06 GiB; the start-up
  left 13.8 GiB beyond the weights).
* **non-torch memory** (CUDA context growth, cuBLAS workspaces; NCCL and custom all-reduce buffers
  at TP > 1), measured: see :data:`NON_TORCH_MEASURED`.
"""

from __future__ import annotations

from dataclasses import dataclass

from oomdoctor.advisor.catalog import GpuSpec, ModelGeometry
from oomdoctor.advisor.memory_model_mm import (
    V0_MM_MIN_BATCHED_TOKENS,
    V0_READ,
    encoder_bytes,
    encoder_profile,
    llava_v0_profile,
    mllama_profile,
    qwen_vl_v0_profile,
    v0_encoder_bytes,
)
from oomdoctor.i18n import _

GiB = 2**30
#: fused_moe processes at most this many tokens at once (envs.py VLLM_FUSED_MOE_CHUNK_SIZE, 64 K)
FUSED_MOE_CHUNK = 65536
#: bytes per sampler logit from 0.17.0 (Triton top-k/top-p, no sort): measured on cases A1/A4
SAMPLER_BYTES_PER_LOGIT = 4 + 4 + 8
#: bytes per sampler logit before 0.17.0, when the warm-up sorts the vocabulary: bf16 logits 2 +
#: fp32 logits 4 + sorted values 4 + sort indices 8 + the sort's index input 8 + cub's alternate
#: buffers 4 + 8 (see the module docstring)
SORTING_SAMPLER_BYTES_PER_LOGIT = 2 + 4 + 4 + 8 + 8 + 4 + 8
#: the first release whose sampler warm-up does not sort (apply_top_k_top_p_triton)
TRITON_TOPK_TOPP = (0, 17, 0)
#: bytes per element of the 16-bit activations
ACT_BYTES = 2
#: the release whose profiler counts reserved memory (``total − free``) while all-reduce inputs are
#: still held for the NCCL stream; 0.2.6 sets TORCH_NCCL_AVOID_RECORD_STREAMS=1 (module docstring)
HELD_ALL_REDUCE = ((0, 2, 5), (0, 2, 6))
#: mllama runs on V0's encoder-decoder runner in every release read (0.6.3–0.8.5); later ones unread
MLLAMA_V0_UNTIL = (0, 9, 0)

Version = tuple[int, int, int]


@dataclass(frozen=True)
class Term:
    bytes: int
    source: str
    #: the term with its unverified share left out (the text model's own peak), where part of it
    #: rests on a formula no start-up log has confirmed for this version; None where all of it is
    #: checked or as good as the rest
    floor: int | None = None
    #: which share is unverified and why, in words (empty when ``floor`` is None)
    unverified: str = ""


def runs_on_v0(geo: ModelGeometry, version: Version | None) -> bool:
    """Whether the model runs on V0's runner: every model before 0.8.0, mllama also after (its
    encoder-decoder runner; V1 had none in the releases read, up to 0.8.5)."""
    return is_v0(version) or (geo.mllama is not None and (version is None or version < MLLAMA_V0_UNTIL))


def is_v0(version: Version | None) -> bool:
    """V0 was the default engine up to 0.7.x (research §1)."""
    return version is not None and version < (0, 8, 0)


def large_gpu(total: int, gpu: GpuSpec | None) -> bool:
    """V1's usage-context defaults treat >= 70 GiB cards other than the A100 as large (research §5)."""
    return total >= 70 * GiB and not (gpu is not None and gpu.name.startswith("A100"))


def batched_tokens(version: Version | None, total: int, gpu: GpuSpec | None, max_model_len: int,
                   chunked_prefill: bool | None = None, given: int | None = None,
                   multimodal: bool = False, engine_v0: bool = False) -> Term:
    """``max_num_batched_tokens`` of the profile run. V0 leaves chunked prefill off by default for a
    multimodal model at any length (engine/arg_utils.py ``create_engine_config``, 0.6.3, 0.6.6.post1,
    0.7.0–0.7.3, 0.8.5) and gives it at least 5120 tokens (``_MULTIMODAL_MODEL_MAX_NUM_BATCHED_TOKENS``,
    config.py, 0.6.3–0.7.3); ``engine_v0`` for a model that runs on V0 whatever the version (mllama)."""
    if given:
        return Term(given, _("given"))
    if is_v0(version) or engine_v0:
        chunked = chunked_prefill if chunked_prefill is not None else (
            version is not None and version >= (0, 5, 3) and max_model_len > 32768 and not multimodal)
        if chunked:
            n = 2048 if version is None or version >= (0, 6, 0) else 512
            term = Term(n, _("V0 default with chunked prefill ({tokens})").format(tokens=n))
        else:
            term = Term(max(max_model_len, 2048), _("V0 default without chunked prefill: max(max_model_len, 2048)"))
        if multimodal and term.bytes < V0_MM_MIN_BATCHED_TOKENS:
            return Term(V0_MM_MIN_BATCHED_TOKENS, _("{rule}, at least 5120 for a multimodal model").format(
                rule=term.source))
        return term
    if large_gpu(total, gpu):
        return Term(8192, _("V1 API-server default on >= 70 GiB GPUs (8192)"))
    return Term(2048, _("V1 API-server default (2048)"))


def max_num_seqs(version: Version | None, total: int, gpu: GpuSpec | None, given: int | None = None,
                 engine_v0: bool = False) -> int:
    """``--max-num-seqs`` (research §5): 256 in V0; in V1 1024 on large GPUs, else 256."""
    if given:
        return given
    if is_v0(version) or engine_v0:
        return 256
    return 1024 if large_gpu(total, gpu) else 256


def intermediate(geo: ModelGeometry) -> int | None:
    """The MLP width: config's intermediate_size, else derived from a dense model's parameter count
    (params = layers × (attention + 3·H·I) + 2·vocab·H)."""
    if geo.intermediate_size:
        return int(geo.intermediate_size)
    if geo.params is None or geo.experts > 1 or not geo.vocab_size:
        return None
    h = geo.hidden
    attn = 2 * h * geo.attention_heads * geo.head_dim + 2 * h * geo.kv_heads * geo.head_dim
    per_layer = (geo.params * 1e9 - 2 * geo.vocab_size * h) / geo.layers - attn
    return max(0, int(per_layer / (3 * h)))


def sampler_bytes_per_logit(version: Version | None) -> int:
    """38 B where the sampler warm-up sorts the vocabulary (before 0.17.0), else 16 B."""
    return SORTING_SAMPLER_BYTES_PER_LOGIT if version is not None and version < TRITON_TOPK_TOPP \
        else SAMPLER_BYTES_PER_LOGIT


def held_all_reduce(geo: ModelGeometry, tokens: int, tp: int, version: Version | None) -> int:
    """Bytes of all-reduce inputs that vLLM 0.2.5's profiler counts at TP > 1 (module docstring):
    the embedding's and two per layer, ``tokens × H`` 16-bit values each; 0 elsewhere."""
    lo, hi = HELD_ALL_REDUCE
    if tp <= 1 or version is None or not lo <= version < hi:
        return 0
    return (2 * max(1, geo.layers) + 1) * tokens * geo.hidden * ACT_BYTES


def activation_peak(geo: ModelGeometry, tokens: int, num_seqs: int, tp: int = 1,
                    version: Version | None = None, max_model_len: int | None = None,
                    release: bool = True) -> Term:
    """The torch peak of vLLM's profile run: max(forward pass, sampler warm-up), plus the
    all-reduce inputs vLLM 0.2.5 counts at TP > 1 (:func:`held_all_reduce`); for a Qwen2-VL-family
    model in V1, max(vision encoder pass, that + what the encoder leaves held)
    (:mod:`~oomdoctor.advisor.memory_model_mm`). A multimodal term carries its ``floor`` (the text
    model's own peak) and why it is unverified; ``release``: the version is a release, not a build
    between releases (:func:`~oomdoctor.advisor.memory_model.is_release`)."""
    term = _activation_peak(geo, tokens, num_seqs, tp, version)
    if geo.mllama is not None and runs_on_v0(geo, version):
        prof = mllama_profile(geo.mllama, num_seqs, term.bytes, tp)
        stage, peak = prof.peak
        return Term(peak, _("V0 encoder-decoder profile run of mllama: {images} dummy images × {tiles} tiles "
                            "through the vision encoder (widest at the {stage}; vLLM 0.6.3–0.8.5 formula)").format(
            images=prof.images, tiles=geo.mllama.max_num_tiles, stage=mllama_stage_words(stage)),
            floor=term.bytes, unverified=mllama_unverified(version, release))
    if (geo.llava is not None or geo.vision is not None) and is_v0(version) and max_model_len:
        if geo.llava is not None:
            vprof = llava_v0_profile(geo.llava, tokens, num_seqs)
            enc = v0_encoder_bytes(geo.llava, vprof, tp)
        else:
            assert geo.vision is not None
            vprof = qwen_vl_v0_profile(geo.vision, version, max_model_len, tokens, num_seqs)
            enc = v0_encoder_bytes(geo.vision, vprof, tp)
        if vprof.dropped:  # the dummy sequences carry no images: the text model's profile alone
            return Term(term.bytes, _("{peak}; {encoder}").format(peak=term.source, encoder=enc.source))
        why = _("the vision encoder's share of V0's profile run: how many items follows vLLM {rule}'s source, "
                "their bytes are an estimate no start-up log has confirmed").format(rule=vprof.rule)
        if version not in V0_READ:
            why += _("; and vLLM {version} is not a release whose source was read").format(
                version=".".join(map(str, version)) if version else "?")
        elif not release:
            why += _("; and this vLLM is a build between releases")
        if enc.pass_bytes > term.bytes + enc.held_bytes:
            return Term(enc.pass_bytes, enc.source, floor=term.bytes, unverified=why)
        return Term(term.bytes + enc.held_bytes, _("{peak} + pixels and outputs of the {encoder}").format(
            peak=term.source, encoder=enc.source), floor=term.bytes, unverified=why)
    if geo.vision is not None and not is_v0(version) and max_model_len:
        enc = encoder_bytes(geo.vision, encoder_profile(geo.vision, max_model_len, tokens, num_seqs), tp)
        why = _("the vision encoder's share of the profile (Qwen2-VL family, V1): what is profiled follows "
                "vLLM 0.10.1's source, its bytes are an estimate no start-up log has confirmed")
        if enc.pass_bytes > term.bytes + enc.held_bytes:
            return Term(enc.pass_bytes, enc.source, floor=term.bytes, unverified=why)
        return Term(term.bytes + enc.held_bytes, _("{peak} + pixels and outputs of the {encoder}").format(
            peak=term.source, encoder=enc.source), floor=term.bytes, unverified=why)
    held = held_all_reduce(geo, tokens, tp, version)
    if not held:
        return term
    return Term(term.bytes + held, _("{peak} + all-reduce inputs held for NCCL: {n} × {tokens} tokens × H × 2 B "
                                     "(vLLM 0.2.5)").format(peak=term.source, n=2 * max(1, geo.layers) + 1,
                                                            tokens=tokens))


#: the releases whose mllama profile (V0's encoder-decoder ``profile_run`` and
#: ``MllamaVisionModel.forward``) was read from the wheel; the code is the same in all of them
MLLAMA_READ = ((0, 6, 3), (0, 6, 6), (0, 7, 0), (0, 7, 1), (0, 7, 2), (0, 7, 3), (0, 8, 5))


def mllama_unverified(version: Version | None, release: bool = True) -> str:
    """Why mllama's profile term is not verified, in words: vllm-049 (a build between 0.6.6 and
    0.7.0, whose releases hold the same code) printed 36.63 GiB where the formula gives 58.60 for
    its 128 images; only the image count and the pixel copies are confirmed (vllm-025, 0.6.3)."""
    why = _("mllama's vision-encoder profile: only its image count and pixel copies are confirmed by a log "
            "(vLLM 0.6.3); for 128 images a build between 0.6.6 and 0.7.0 printed 36.63 GiB where this "
            "formula gives 58.60 GiB")
    if version is None:
        return why + _("; and the vLLM version is not known")
    if not release:
        return why + _("; and this vLLM is a build between releases")
    if version not in MLLAMA_READ:
        return why + _("; and vLLM {version} is not a release whose source was read").format(
            version=".".join(map(str, version)))
    return why


def mllama_stage_words(stage: str) -> str:
    """The name of a stage of :func:`~oomdoctor.advisor.memory_model_mm.mllama_profile`, in the
    language in force."""
    return {
        "patch embedding": _("patch embedding"),
        "local transformer": _("local transformer"),
        "global transformer": _("global transformer"),
        "output concatenation": _("output concatenation"),
        "projector": _("projector"),
        "text dummy run": _("text dummy run"),
    }.get(stage, stage)


def _activation_peak(geo: ModelGeometry, tokens: int, num_seqs: int, tp: int,
                     version: Version | None) -> Term:
    tp = max(1, tp)
    h = geo.hidden
    inter = intermediate(geo)
    if inter is None:
        forward = tokens * 3 * h * ACT_BYTES
        fwd_src = _("{tokens} tokens × 3·H × 2 B").format(tokens=tokens)
    elif geo.experts > 1:
        m = min(tokens, FUSED_MOE_CHUNK)
        n = 2 * inter // tp
        forward = (m * geo.experts_per_token * (max(n, h) + n // 2) + tokens * 3 * h) * ACT_BYTES
        fwd_src = _("MoE: {tokens} tokens × top-{k} × (max(2I/tp, H) + I/tp) × 2 B").format(tokens=m, k=geo.experts_per_token)
    else:
        forward = tokens * (3 * inter // tp + 3 * h) * ACT_BYTES
        fwd_src = _("{tokens} tokens × (3·I/tp + 3·H) × 2 B").format(tokens=tokens)
    rows = min(num_seqs, tokens)
    per = sampler_bytes_per_logit(version)
    sampler = rows * int(geo.vocab_size or 0) * per
    if sampler > forward:
        return Term(sampler, _("sampler warm-up: {rows} rows × vocab {vocab} × {bytes} B").format(
            rows=rows, vocab=geo.vocab_size, bytes=per))
    return Term(forward, fwd_src)


#: non-torch memory measured by vLLM's profiler (GiB), by engine generation and TP, cases.json:
#: V1 0.19.0 on H100: TP 1 0.24–0.25 (A1, A4), TP 2 2.06–2.07 (A2, A5), TP 4 2.13 (A3, A6);
#: V0 0.6.5 on H100: TP 1 1.79, TP 2 3.58 (B3, B4) -- V0's ``memory_profiling`` (0.6.5-0.7.x, research
#: §1.1); V1 0.10.2 on 8× L40S (PCIe, no NVLink): 0.21 (B9); 0.6.4 on an RTX 3090: 0.35 (B1, B2), which
#: the V1 TP-1 figure stands for.
NON_TORCH_MEASURED = {
    ("v1", False): 0.25,
    ("v1", True): 2.13,
    ("v0", False): 1.79,
    ("v0", True): 3.58,
}


def non_torch(version: Version | None, tp: int, gpu: GpuSpec | None) -> Term:
    """Non-torch memory: a measured value for this engine generation and TP (see above). Without
    NVLink (PCIe cards such as the L40S) NCCL and custom all-reduce buffers stay small (case B9)."""
    if version is not None and version < (0, 2, 5):
        return Term(0, _("not counted: vLLM 0.2.0–0.2.4 subtract the torch peak only"))
    gen = "v0" if version is not None and (0, 6, 5) <= version < (0, 8, 0) else "v1"
    multi = tp > 1 and (gpu is None or gpu.nvlink)
    gib = NON_TORCH_MEASURED[(gen, multi)]
    if gen == "v1" and not multi:
        case = _("start-ups A1/A4 (0.19.0, TP 1)") if tp == 1 else _("start-up B9 (0.10.2, TP 8 over PCIe)")
    elif gen == "v1":
        case = _("start-ups A3/A6 (0.19.0, TP 4, NVLink)")
    else:
        case = _("start-up B4 (0.6.5, TP 2)") if multi else _("start-up B3 (0.6.5, TP 1)")
    return Term(int(gib * GiB), _("measured {gib} GiB, {case}").format(gib=f"{gib:.2f}", case=case))
