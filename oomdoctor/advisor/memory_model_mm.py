"""The multimodal encoder's share of vLLM's profile run: V1 for the Qwen2-VL / Qwen2.5-VL family
(below), V0 for mllama's encoder-decoder runner and for LLaVA-1.5, LLaVA-NeXT and Qwen2-VL on the
decoder-only runner (the sections further down). No start-up log confirms any of these terms'
bytes (mllama's pixel copies excepted): each carries the text model's own peak as its floor, and
``fit`` does not say "does not fit" on such a term alone (:func:`~oomdoctor.advisor.fit.fit`).

What is profiled is read from vLLM 0.10.1's source (the release wheel); the bytes it takes are an
estimate over the vision tower's shapes. Only the first is tested against the source's formula
(tests/test_memory_model_mm.py); no start-up with these figures has been measured yet.

**What V1 profiles** (``GPUModelRunner.profile_run``, v1/worker/gpu_model_runner.py@v0.10.1):
before the text model's dummy run, the vision encoder runs once on a dummy batch of
``max_mm_items_per_batch`` items of the modality with the most tokens per item, and its outputs stay
in the encoder cache through the dummy run and the sampler warm-up.

* tokens per item (``get_mm_max_tokens_per_item``, models/qwen2_vl.py@v0.10.1, with
  ``mm_counts`` one of each modality and ``seq_len = max_model_len``): an image of the size with
  the most features, ``smart_resize(9999999, 9999999, factor=patch·merge, min_pixels, max_pixels)``
  (transformers' Qwen2-VL image processor; ``max_pixels`` 12845056 in the published
  preprocessor_config.json of Qwen2-VL and Qwen2.5-VL: 3584 × 3584 px, 16384 tokens); a video of
  as many such frames as fit in ``max_model_len`` minus one image (at most 16,
  ``_MAX_FRAMES_PER_VIDEO``), frames padded to the temporal patch (2).
* budget (``compute_encoder_budget``, v1/core/encoder_cache_manager.py; ``MultiModalBudget``,
  v1/worker/utils.py): ``max(max_num_batched_tokens, max tokens per item)`` for both the encoder
  compute budget and the cache (both default to ``max_num_batched_tokens``, config/scheduler.py).
* items (``MultiModalBudget.get_max_items``): ``max(1, min(budget // item tokens, max_num_seqs ×
  min(limit_mm_per_prompt (999 in V1), max_model_len // item tokens)))``.
* the dummy item itself is built with ``seq_len = max_num_batched_tokens``
  (``_get_mm_dummy_batch``): an image is the same 16384-token one; a video has as many frames as fit
  in ``max_num_batched_tokens`` (at least one).

**Bytes** (estimate): per patch (4 patches make a token at ``spatial_merge_size`` 2) the fp32
``pixel_values`` (C × T × patch² × 4 B, held until ``profile_run`` returns) plus the widest point
of a vision block, its MLP: the residual and the normed input (2·E) and the MLP's intermediates
(gated, Qwen2.5-VL: 2I + I; Qwen2-VL: fc1 and its activation, 2 × mlp_ratio·E), split by TP;
per token the encoder output (``out_hidden`` × 2 B) kept in the encoder cache. The profile's peak
is max(encoder pass, text dummy run + pixels + encoder outputs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from oomdoctor.i18n import _

#: max_pixels of the published preprocessor_config.json of Qwen2-VL and Qwen2.5-VL checkpoints
QWEN_VL_MAX_PIXELS = 12845056
#: min_pixels of the same files
QWEN_VL_MIN_PIXELS = 3136
#: vLLM V1's default limit_mm_per_prompt per modality (config get_limit_per_prompt@v0.10.1)
V1_MM_LIMIT = 999
#: models/qwen2_vl.py@v0.10.1
MAX_FRAMES_PER_VIDEO = 16
#: the side of the dummy image vLLM asks for (get_image_size_with_most_features)
HUGE = 9999999
#: model_type values whose vision tower this module knows
FAMILIES = ("qwen2_vl", "qwen2_5_vl")


@dataclass(frozen=True)
class VisionTower:
    """A Qwen2-VL-family vision tower, from ``config.json``'s ``vision_config``."""

    family: str
    width: int  # E: embed_dim (Qwen2-VL) or hidden_size (Qwen2.5-VL)
    intermediate: int  # I: mlp_ratio·E (Qwen2-VL) or intermediate_size (Qwen2.5-VL)
    gated: bool  # SiLU-gated MLP (Qwen2.5-VL)
    out_hidden: int  # what the merger hands the text model per token
    patch_size: int = 14
    merge_size: int = 2
    temporal_patch_size: int = 2
    in_chans: int = 3


def vision_tower(cfg: dict[str, Any]) -> VisionTower | None:
    """The vision tower of a Qwen2-VL / Qwen2.5-VL ``config.json``; None for any other model."""
    family = str(cfg.get("model_type") or "")
    vcfg = cfg.get("vision_config")
    if family not in FAMILIES or not isinstance(vcfg, dict):
        return None
    inner = cfg.get("text_config")
    text: dict[str, Any] = inner if isinstance(inner, dict) else cfg
    if family == "qwen2_vl":  # hidden_size there is the merger's output width
        width = int(vcfg.get("embed_dim") or 1280)
        inter = int(float(vcfg.get("mlp_ratio") or 4) * width)
        out = int(vcfg.get("hidden_size") or text.get("hidden_size") or width)
        gated = False
    else:
        width = int(vcfg.get("hidden_size") or 1280)
        inter = int(vcfg.get("intermediate_size") or 4 * width)
        out = int(vcfg.get("out_hidden_size") or text.get("hidden_size") or width)
        gated = "silu" in str(vcfg.get("hidden_act", "silu"))
    return VisionTower(
        family=family, width=width, intermediate=inter, gated=gated, out_hidden=out,
        patch_size=int(vcfg.get("patch_size") or vcfg.get("spatial_patch_size") or 14),
        merge_size=int(vcfg.get("spatial_merge_size") or 2),
        temporal_patch_size=int(vcfg.get("temporal_patch_size") or 2),
        in_chans=int(vcfg.get("in_chans") or vcfg.get("in_channels") or 3),
    )


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """transformers' ``smart_resize`` (models/qwen2_vl/image_processing_qwen2_vl.py)."""
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _frame_patches(v: VisionTower, max_pixels: int) -> int:
    """Patches of one frame of the largest image (grid_h × grid_w)."""
    h, w = smart_resize(HUGE, HUGE, v.patch_size * v.merge_size, QWEN_VL_MIN_PIXELS, max_pixels)
    return (h // v.patch_size) * (w // v.patch_size)


def item_tokens(v: VisionTower, frames: int, max_pixels: int = QWEN_VL_MAX_PIXELS) -> int:
    """Tokens of an item of ``frames`` largest frames (an image is one): ``_get_vision_info``."""
    padded = frames + frames % v.temporal_patch_size
    grid_t = max(padded // v.temporal_patch_size, 1)
    return grid_t * _frame_patches(v, max_pixels) // v.merge_size**2


def video_frames(v: VisionTower, seq_len: int, images: int, max_pixels: int = QWEN_VL_MAX_PIXELS) -> int:
    """``get_num_frames_with_most_features`` for one video beside ``images`` images."""
    room = seq_len - item_tokens(v, 1, max_pixels) * images
    frames = 0
    while item_tokens(v, frames + 1, max_pixels) <= room:
        frames += 1
    return max(min(frames, MAX_FRAMES_PER_VIDEO), 1)


@dataclass(frozen=True)
class EncoderProfile:
    modality: str
    items: int
    item_tokens: int  # tokens of the dummy item the encoder runs on
    budget: int  # the encoder budget in tokens (compute and cache)

    @property
    def tokens(self) -> int:
        return self.items * self.item_tokens


def encoder_profile(v: VisionTower, max_model_len: int, max_num_batched_tokens: int, max_num_seqs: int,
                    limit_mm_per_prompt: int = V1_MM_LIMIT,
                    max_pixels: int = QWEN_VL_MAX_PIXELS) -> EncoderProfile:
    """What V1's profile run feeds the vision encoder (module docstring, vLLM 0.10.1)."""
    image = item_tokens(v, 1, max_pixels)
    video = item_tokens(v, video_frames(v, max_model_len, 1, max_pixels), max_pixels)
    modality, max_tok = ("video", video) if video > image else ("image", image)
    budget = max(max_num_batched_tokens, max_tok)
    per_prompt = max(1, min(limit_mm_per_prompt, max_model_len // max_tok))
    items = max(1, min(budget // max_tok, max_num_seqs * per_prompt))
    if modality == "image":
        dummy = image
    else:
        dummy = item_tokens(v, video_frames(v, max_num_batched_tokens, 0, max_pixels), max_pixels)
    return EncoderProfile(modality, items, dummy, budget)


@dataclass(frozen=True)
class EncoderBytes:
    pass_bytes: int  # the encoder pass: pixels + the widest point of a block
    held_bytes: int  # kept through the text model's dummy run: pixels + encoder outputs
    source: str


def encoder_bytes(v: VisionTower, prof: EncoderProfile, tp: int = 1) -> EncoderBytes:
    """Bytes of the encoder's profile (estimate, module docstring)."""
    tp = max(1, tp)
    patches = prof.tokens * v.merge_size**2
    pixels = patches * v.in_chans * v.temporal_patch_size * v.patch_size**2 * 4
    mlp = (3 if v.gated else 2) * v.intermediate // tp
    block = patches * (2 * v.width + mlp) * 2
    outputs = prof.tokens * v.out_hidden * 2
    src = _("vision encoder profile: {items} {modality} × {tokens} tokens ({patches} patches; "
            "encoder budget {budget}, vLLM 0.10.1 formula)").format(
        items=prof.items, modality=_("image") if prof.modality == "image" else _("video"), tokens=prof.item_tokens, patches=patches, budget=prof.budget)
    return EncoderBytes(pixels + block, pixels + outputs, src)


# --------------------------------------------------------------------------------------------------
# Mllama (Llama-3.2-Vision) on vLLM V0's encoder-decoder runner
# --------------------------------------------------------------------------------------------------
#
# **What V0 profiles** (``EncoderDecoderModelRunner.profile_run``, worker/enc_dec_model_runner.py,
# the same loop in 0.6.3, 0.6.6.post1, 0.7.0–0.7.3 and 0.8.5; mllama never ran on V1's runner in
# these releases): ``max_num_seqs`` dummy sequences, every one with the model's encoder dummy data,
# and no cap by tokens (the decoder-only runner's ``max_num_batched_tokens // max_mm_tokens`` cap is
# not in this runner). For mllama (models/mllama.py@v0.7.0, ``dummy_encoder_data_for_mllama``) that
# is ``limit_mm_per_prompt`` images (1 by default) of 1024 × 1024 px per sequence; the image
# processor pads each to ``max_num_tiles`` tiles of ``image_size``² px. All of them go through the
# vision encoder in one batch.
#
# **Bytes** (``MllamaVisionModel.forward``, the same code 0.6.3–0.8.5), with N images, T tiles,
# p = (image_size / patch_size)² + 1 patches per tile padded to a multiple of 8 (p8), L = T·p8
# tokens per image, E the vision width, I its MLP width, k = len(intermediate_layers_indices):
#
# * pixels: two fp32 copies held through the whole forward, the batched ``pixel_values`` the runner
#   passes (``MultiModalKwargs.as_kwargs``) and ``out_images`` (``_parse_and_validate_image_input``):
#   ``2 × N·T·3·image_size²·4 B``.
# * the patch embedding: a bf16 copy of the pixels and its ``Unfold`` (both N·T·3·image_size²·2 B)
#   and the ``ColumnParallelLinear`` output, ``N·T·(p−1)·E/tp·2 B``.
# * the attention mask (``_prepare_aspect_ratio_attention_mask``): ``N·L²·2 B``, held through both
#   transformers (memory-efficient SDPA takes it broadcast over the heads, no copy).
# * a hidden state S = ``N·L·E·2 B`` (all-gathered, full width at any TP). The local transformer
#   keeps the input of each layer in ``intermediate_layers_indices`` (k of them); the forward stacks
#   them (a copy, k·S) while the tuple stays referenced (``output``), keeps the local output, and the
#   global transformer's input stays held by the caller. In a layer's MLP: the layer's input, the
#   residual, the normed input (3·S) and ``fc1`` with its GELU (2·I/E·S/tp). Peak of the global
#   transformer: ``pixels + mask + (2k + 5)·S + 2·(I/E)·S/tp``.
# * after it: the concatenated output (``N·T·p·E·(k+1)·2 B``) and the projector's output
#   (``N·T·p·H·2 B``, H the text width); then the text model's dummy run beside the pixels and the
#   projected states, with every cross-attention layer projecting all ``N·T·p`` encoder tokens
#   through ``qkv_proj`` and its K through an fp32 RMSNorm.
#
# Checked: corpus vllm-025 (0.6.3, TP 2, A10, 256 images): the OOM asks for the patch embedding's
# output exactly (1.95 GiB) with the pixels, their bf16 copy and the unfold (10.77 GiB) in use beside
# the weights; the log shows 10.83. Corpus vllm-049 (Llama-3.2-11B-Vision, 128 sequences) printed a
# peak of 36.63 GiB where this gives 58.6 GiB for 128 images: see the README.

#: the dummy image of mllama's profile run (``dummy_image``, models/mllama.py@v0.7.0)
MLLAMA_DUMMY_IMAGE_PX = 1024
#: V0's default ``limit_mm_per_prompt`` per modality (multimodal/registry.py@v0.7.0)
V0_MM_LIMIT = 1


@dataclass(frozen=True)
class MllamaVision:
    """Mllama's vision tower, from ``config.json``'s ``vision_config`` and ``text_config``."""

    width: int  # E: vision_config.hidden_size
    intermediate: int  # I: vision_config.intermediate_size
    image_size: int
    patch_size: int
    max_num_tiles: int
    saved_layers: int  # k: len(intermediate_layers_indices)
    text_hidden: int  # H: the projector's output width
    text_q: int  # query width of a cross-attention layer (heads × head_dim)
    text_kv: int  # key (= value) width of a cross-attention layer
    channels: int = 3

    @property
    def tile_patches(self) -> int:
        """Patches of one tile with the class token: ``(image_size // patch_size)² + 1``."""
        return (self.image_size // self.patch_size) ** 2 + 1

    @property
    def image_tokens(self) -> int:
        """Tokens of one padded image in the vision transformers: T × (patches padded to 8)."""
        return self.max_num_tiles * (-(-self.tile_patches // 8) * 8)


def mllama_vision(cfg: dict[str, Any]) -> MllamaVision | None:
    """The vision tower of an mllama ``config.json``; None for any other model."""
    vcfg, tcfg = cfg.get("vision_config"), cfg.get("text_config")
    if str(cfg.get("model_type") or "") != "mllama" or not isinstance(vcfg, dict) or not isinstance(tcfg, dict):
        return None
    width = int(vcfg.get("hidden_size") or 1280)
    hidden = int(tcfg.get("hidden_size") or 4096)
    heads = int(tcfg.get("num_attention_heads") or 32)
    head_dim = hidden // heads
    kv = int(tcfg.get("num_key_value_heads") or heads)
    return MllamaVision(
        width=width, intermediate=int(vcfg.get("intermediate_size") or 4 * width),
        image_size=int(vcfg.get("image_size") or 560), patch_size=int(vcfg.get("patch_size") or 14),
        max_num_tiles=int(vcfg.get("max_num_tiles") or 4),
        saved_layers=len(vcfg.get("intermediate_layers_indices") or [3, 7, 15, 23, 30]),
        text_hidden=hidden, text_q=heads * head_dim, text_kv=kv * head_dim,
        channels=int(vcfg.get("num_channels") or 3),
    )


@dataclass(frozen=True)
class MllamaProfile:
    images: int
    stages: dict[str, int]  # the torch bytes live at each stage's widest point

    @property
    def peak(self) -> tuple[str, int]:
        name = max(self.stages, key=lambda s: self.stages[s])
        return name, self.stages[name]


def mllama_profile(v: MllamaVision, max_num_seqs: int, text_forward: int, tp: int = 1,
                   images_per_prompt: int = V0_MM_LIMIT) -> MllamaProfile:
    """The torch bytes of V0's profile run for mllama, by stage (block comment above):
    ``text_forward`` is the text model's own dummy-run peak (dense MLP or sampler)."""
    tp = max(1, tp)
    n = max(1, max_num_seqs) * max(1, images_per_prompt)
    t, p, e, k = v.max_num_tiles, v.tile_patches, v.width, v.saved_layers
    tokens = v.image_tokens
    pix32 = n * t * v.channels * v.image_size**2 * 4
    pixels = 2 * pix32
    s = n * tokens * e * 2
    mask = n * tokens**2 * 2
    mlp = 2 * (n * tokens * v.intermediate * 2 // tp)
    enc_tokens = n * t * p
    cat = enc_tokens * e * (k + 1) * 2
    projected = enc_tokens * v.text_hidden * 2
    qkv_enc = enc_tokens * (v.text_q + 2 * v.text_kv) // tp * 2
    k_norm = 2 * enc_tokens * v.text_kv // tp * 4  # the fp32 copy of K and its product in the RMSNorm
    stages = {
        "patch embedding": pixels + pix32 + n * t * (p - 1) * e // tp * 2,  # bf16 copy + unfold = pix32
        "local transformer": pixels + mask + (k + 3) * s + mlp,
        "global transformer": pixels + mask + (2 * k + 5) * s + mlp,
        "output concatenation": pixels + mask + (2 * k + 2) * s + cat,
        "projector": pixels + cat + projected,
        "text dummy run": pixels + projected + max(text_forward, qkv_enc + k_norm),
    }
    return MllamaProfile(n, stages)


# --------------------------------------------------------------------------------------------------
# Decoder-only multimodal models on vLLM V0's runner: LLaVA-1.5, LLaVA-NeXT, Qwen2-VL
# --------------------------------------------------------------------------------------------------
#
# **How many items V0 profiles** (``GPUModelRunnerBase._dummy_run``, worker/model_runner.py, the
# same in 0.6.3, 0.6.6.post1, 0.7.0 and 0.7.3): ``max_mm_tokens`` is the sum over the modalities of
# ``limit_mm_per_prompt`` (1 by default) × the most tokens one item can have
# (``MultiModalRegistry.get_max_multimodal_tokens``, at ``seq_len = max_model_len``); the profile
# runs ``max(1, min(max_num_seqs, max_num_batched_tokens // max_mm_tokens))`` dummy sequences
# sharing ``max_num_batched_tokens`` (``seq_len = batched // seqs``, the first ``batched % seqs``
# one longer), each with the model's dummy data for its ``seq_len``. ``max_num_batched_tokens`` of
# a multimodal model is at least 5120 (``_MULTIMODAL_MODEL_MAX_NUM_BATCHED_TOKENS``, config.py, the
# same four releases) and chunked prefill is off by default (engine/arg_utils.py).
#
# **What a dummy sequence carries**, by family and release:
#
# * LLaVA-1.5 (``llava``; legacy ``dummy_data_for_llava`` in 0.6.3, ``LlavaDummyInputsBuilder``
#   from 0.6.6.post1): ``limit`` images of ``image_size``² px, each
#   ``(image_size / patch_size)²`` tokens (+1 with ``vision_feature_select_strategy = "full"``),
#   one CLIP crop per image.
# * LLaVA-NeXT (``llava_next``; ``get_max_llava_next_image_tokens`` in 0.6.3 and 0.6.6.post1,
#   ``LlavaNextProcessingInfo`` in 0.7.0–0.7.3): the image whose anyres grid has the most features,
#   base + unpadded + newline features (``_get_num_unpadded_features``); the HF processor cuts it
#   into 1 + grid_h × grid_w crops of ``image_size``². 0.6.x builds it from a 448 × 448 image, 0.7.x
#   from the best pinpoint: for the published pinpoints (up to 672 × 672) both give the 2 × 2 grid.
# * Qwen2-VL / Qwen2.5-VL (``qwen2_vl``):
#
#   - 0.6.3 (``dummy_data_for_qwen2_vl``): images only, of ``max_pixels`` capped at 1280·28² px
#     (1225 tokens); ``max_mm_tokens`` counts the image and the video limits at 1225 each.
#   - 0.6.6.post1 (``Qwen2VLMultiModalProcessor._get_dummy_mm_inputs``): images only, at the
#     processor's ``max_pixels`` (16384 tokens at the published 12845056); the video counts one frame
#     pair (16384) in ``max_mm_tokens``.
#   - 0.7.0 (``Qwen2VLDummyInputsBuilder``): ``limit`` images and ``limit`` videos of
#     ``get_num_frames_with_most_features(seq_len)`` frames (an odd count above 1 is made even, the
#     transformers#35412 workaround); 0.7.3 pads frames to the temporal patch instead
#     (``padded_num_frames``), as V1 does. From 0.7.0 a dummy sequence whose items do not fit its
#     ``seq_len`` carries **no** multimodal data (``MultiModalProfiler.get_dummy_data``: "The
#     context length … is too short"), and the profile is the text model's alone.
#
# **Bytes** (estimate, as for V1): the fp32 pixels stay referenced by the model's kwargs through
# the forward; the encoder's widest point is a block's MLP; the projected outputs are held into the
# text model's dummy run. CLIP (LLaVA): per crop token the residual and normed input (2·E) and fc1
# with its activation (2·I/tp), × 2 B.

#: ``_MULTIMODAL_MODEL_MAX_NUM_BATCHED_TOKENS`` (config.py@v0.6.3, @v0.6.6.post1, @v0.7.0, @v0.7.3)
V0_MM_MIN_BATCHED_TOKENS = 5120
#: 0.6.3's cap on Qwen2-VL's dummy image (``_get_max_image_info``: ``min(max_pixels, 1280 * 28 * 28)``)
QWEN_VL_V063_MAX_PIXELS = 1280 * 28 * 28
#: the releases whose V0 dummy data for these families was read
V0_READ = ((0, 6, 3), (0, 6, 6), (0, 7, 0), (0, 7, 3))
#: model_type values of the LLaVA family this module knows
LLAVA_FAMILIES = ("llava", "llava_next")


@dataclass(frozen=True)
class ClipTower:
    """A LLaVA / LLaVA-NeXT CLIP vision tower, from ``config.json``."""

    family: str
    width: int  # E: vision_config.hidden_size
    intermediate: int  # I: vision_config.intermediate_size
    image_size: int
    patch_size: int
    full: bool  # vision_feature_select_strategy == "full" (keeps the class token)
    text_hidden: int  # the projector's output width
    pinpoints: tuple[tuple[int, int], ...] = ()  # (height, width), LLaVA-NeXT
    channels: int = 3

    @property
    def grid(self) -> int:
        """Patches per side of one crop."""
        return self.image_size // self.patch_size

    @property
    def crop_tokens(self) -> int:
        """Tokens of one crop in the tower, with the class token."""
        return self.grid**2 + 1

    @property
    def base_tokens(self) -> int:
        """Features one crop hands the text model (the class token dropped unless ``full``)."""
        return self.crop_tokens - (0 if self.full else 1)

    def best_grid(self, height: int, width: int) -> tuple[int, int]:
        """transformers' ``select_best_resolution`` over the pinpoints, as (rows, columns) of crops."""
        best, key = (self.image_size, self.image_size), (-1, 0)
        for ph, pw in self.pinpoints:
            scale = min(pw / width, ph / height)
            dw, dh = int(width * scale), int(height * scale)
            effective = min(dw * dh, width * height)
            cand = (effective, -(pw * ph - effective))
            if cand > key:
                best, key = (ph, pw), cand
        return best[0] // self.image_size, best[1] // self.image_size

    def anyres_tokens(self, height: int, width: int) -> int:
        """``LlavaNextProcessingInfo.get_num_image_tokens`` (models/llava_next.py@v0.7.0)."""
        rows, cols = self.best_grid(height, width)
        cur_h, cur_w = self.grid * rows, self.grid * cols
        if width / height > cur_w / cur_h:
            cur_h -= 2 * ((cur_h - (height * cur_w) // width) // 2)
        else:
            cur_w -= 2 * ((cur_w - (width * cur_h) // height) // 2)
        return cur_h * cur_w + cur_h + self.base_tokens

    @property
    def largest(self) -> tuple[int, int]:
        """(tokens, crops) of the item with the most features: one crop for LLaVA-1.5; for
        LLaVA-NeXT the pinpoint with the most tokens (``get_image_size_with_most_features``)."""
        if self.family != "llava_next" or not self.pinpoints:
            return self.base_tokens, 1
        tokens, (h, w) = max((self.anyres_tokens(h, w), (h, w)) for h, w in self.pinpoints)
        rows, cols = self.best_grid(h, w)
        return tokens, 1 + rows * cols


def llava_tower(cfg: dict[str, Any]) -> ClipTower | None:
    """The CLIP tower of a LLaVA or LLaVA-NeXT ``config.json``; None for any other model (a SigLIP
    tower too: its shapes are not modelled)."""
    family = str(cfg.get("model_type") or "")
    vcfg = cfg.get("vision_config")
    if family not in LLAVA_FAMILIES or not isinstance(vcfg, dict):
        return None
    if "siglip" in str(vcfg.get("model_type") or ""):
        return None
    tcfg = cfg.get("text_config")
    text: dict[str, Any] = tcfg if isinstance(tcfg, dict) else cfg
    # a field the vision_config leaves out takes CLIPVisionConfig's default (transformers 4.47.0
    # models/clip/configuration_clip.py: 768, 3072, 224 px, patch 32), as transformers builds it
    width = int(vcfg.get("hidden_size") or 768)
    pins = cfg.get("image_grid_pinpoints") or []
    return ClipTower(
        family=family, width=width, intermediate=int(vcfg.get("intermediate_size") or 3072),
        image_size=int(vcfg.get("image_size") or 224), patch_size=int(vcfg.get("patch_size") or 32),
        full=str(cfg.get("vision_feature_select_strategy") or "default") == "full",
        text_hidden=int(text.get("hidden_size") or 4096),
        pinpoints=tuple((int(p[0]), int(p[1])) for p in pins if isinstance(p, list | tuple) and len(p) == 2),
        channels=int(vcfg.get("num_channels") or 3),
    )


@dataclass(frozen=True)
class V0Item:
    modality: str
    count: int  # items of this modality over all dummy sequences
    tokens: int  # tokens each hands the text model
    crops: int = 1  # CLIP crops each (LLaVA-NeXT's anyres)


@dataclass(frozen=True)
class V0Profile:
    """What V0's profile run feeds the encoder (block comment above)."""

    seqs: int
    items: tuple[V0Item, ...]
    max_mm_tokens: int
    rule: str  # the release whose rule applies, e.g. "0.7.0"
    dropped: bool = False  # the dummy sequences were too short to carry their items

    @property
    def tokens(self) -> int:
        return sum(i.count * i.tokens for i in self.items)


def v0_profile_seqs(max_mm_tokens: int, batched: int, max_num_seqs: int) -> int:
    """``max(1, min(max_num_seqs, max_num_batched_tokens // max_mm_tokens))`` (``_dummy_run``)."""
    if max_mm_tokens <= 0:
        return max(1, max_num_seqs)
    return max(1, min(max_num_seqs, batched // max_mm_tokens))


def v0_rule(version: tuple[int, int, int] | None) -> str:
    """The read release whose V0 dummy data stands for ``version``: the latest read at or before it."""
    if version is None or version >= (0, 7, 3):
        return "0.7.3"
    return ".".join(map(str, max((r for r in V0_READ if r <= version), default=V0_READ[0])))


def llava_v0_profile(t: ClipTower, batched: int, max_num_seqs: int, limit: int = 1) -> V0Profile:
    """LLaVA-1.5 / LLaVA-NeXT in V0 (0.6.3–0.7.3: the same for the published configurations)."""
    tokens, crops = t.largest
    max_mm = max(1, limit) * tokens
    seqs = v0_profile_seqs(max_mm, batched, max_num_seqs)
    return V0Profile(seqs, (V0Item("image", seqs * max(1, limit), tokens, crops),), max_mm, "0.6.3–0.7.3")


def _frames_070(v: VisionTower, room: int, videos: int, max_pixels: int) -> int:
    """``get_num_frames_with_most_features`` of 0.7.0: the most frames whose tokens fit ``room``
    (``grid_t = max(frames // 2, 1)``), shared by the videos, at least 1 and at most 16, an odd
    count above 1 made even (models/qwen2_vl.py@v0.7.0)."""
    per_pair = _frame_patches(v, max_pixels) // v.merge_size**2
    total = 0
    while max((total + 1) // v.temporal_patch_size, 1) * per_pair <= room:
        total += 1
    frames = min(max(total // max(videos, 1), 1), MAX_FRAMES_PER_VIDEO)
    return frames + 1 if frames > 1 and frames % 2 else frames


def _video_tokens_070(v: VisionTower, frames: int, max_pixels: int) -> int:
    return max(frames // v.temporal_patch_size, 1) * (_frame_patches(v, max_pixels) // v.merge_size**2)


def qwen_vl_v0_profile(v: VisionTower, version: tuple[int, int, int] | None, max_model_len: int, batched: int,
                       max_num_seqs: int, images: int = 1, videos: int = 1,
                       max_pixels: int = QWEN_VL_MAX_PIXELS) -> V0Profile:
    """Qwen2-VL / Qwen2.5-VL in V0, by the rule of the read release at or before ``version``."""
    rule = v0_rule(version)
    if rule == "0.6.3":
        image = item_tokens(v, 1, min(max_pixels, QWEN_VL_V063_MAX_PIXELS))
        max_mm = images * image + videos * image
        seqs = v0_profile_seqs(max_mm, batched, max_num_seqs)
        return V0Profile(seqs, (V0Item("image", seqs * images, image),), max_mm, rule)
    image = item_tokens(v, 1, max_pixels)
    if rule == "0.6.6":
        max_mm = images * image + videos * image
        seqs = v0_profile_seqs(max_mm, batched, max_num_seqs)
        return V0Profile(seqs, (V0Item("image", seqs * images, image),), max_mm, "0.6.6.post1")

    def video_at(seq_len: int) -> int:
        room = seq_len - image * images
        if rule == "0.7.0":
            frames = _frames_070(v, room, videos, max_pixels)
            return _video_tokens_070(v, frames, max_pixels)
        frames = 0
        while item_tokens(v, frames + 1, max_pixels) <= room:
            frames += 1
        frames = max(min(frames // max(videos, 1), MAX_FRAMES_PER_VIDEO), 1)
        return item_tokens(v, frames, max_pixels)

    max_mm = images * image + videos * video_at(max_model_len)
    seqs = v0_profile_seqs(max_mm, batched, max_num_seqs)
    seq_len = batched // seqs
    video = video_at(seq_len)
    if images * image + videos * video > seq_len:  # "The context length ... is too short": text only
        return V0Profile(seqs, (), max_mm, rule, dropped=True)
    items = tuple(i for i in (V0Item("image", seqs * images, image), V0Item("video", seqs * videos, video))
                  if i.count)
    return V0Profile(seqs, items, max_mm, rule)


def v0_encoder_bytes(tower: VisionTower | ClipTower, prof: V0Profile, tp: int = 1) -> EncoderBytes:
    """Bytes of V0's encoder profile (estimate): the widest encoder pass, with what the other
    modality holds beside it, and what stays held into the text model's dummy run."""
    tp = max(1, tp)
    passes, held = [], []
    for item in prof.items:
        if isinstance(tower, ClipTower):
            crops = item.count * item.crops
            pixels = crops * tower.channels * tower.image_size**2 * 4
            block = crops * tower.crop_tokens * (2 * tower.width + 2 * tower.intermediate // tp) * 2
            outputs = item.count * item.tokens * tower.text_hidden * 2
            passes.append(pixels + block)
            held.append(pixels + outputs)
        else:
            eb = encoder_bytes(tower, EncoderProfile(item.modality, item.count, item.tokens, 0), tp)
            passes.append(eb.pass_bytes)
            held.append(eb.held_bytes)
    widest = max((p + sum(held) - h for p, h in zip(passes, held, strict=True)), default=0)
    if prof.dropped:
        src = _("V0 profile run: {seqs} dummy sequence(s) too short for their images and videos "
                "({tokens} tokens), so they carry none (vLLM {rule} rule)").format(
            seqs=prof.seqs, tokens=prof.max_mm_tokens, rule=prof.rule)
    else:
        what = ", ".join(_("{count} × {modality} of {tokens} tokens").format(
            count=i.count, modality=_("image") if i.modality == "image" else _("video"), tokens=i.tokens)
            for i in prof.items)
        src = _("V0 profile run: {seqs} dummy sequence(s), {what} through the vision encoder "
                "(vLLM {rule} rule)").format(seqs=prof.seqs, what=what, rule=prof.rule)
    return EncoderBytes(widest, sum(held), src)
