"""The multimodal encoder's share of vLLM's profile run (V1), for the Qwen2-VL / Qwen2.5-VL family.

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
