"""The multimodal encoder's profile budget (oomdoctor/advisor/memory_model_mm.py) against vLLM
0.10.1's formula (read from the release wheel): what V1's profile run feeds a Qwen2-VL-family
vision encoder. Only the formula is tested here: no start-up that printed these figures has been
measured yet, so the bytes per patch are an estimate (README, "How close it is")."""

from __future__ import annotations

from typing import Any

import pytest

from oomdoctor.advisor.catalog import geometry_from_config
from oomdoctor.advisor.memory_model_mm import (
    EncoderProfile,
    encoder_bytes,
    encoder_profile,
    item_tokens,
    smart_resize,
    video_frames,
    vision_tower,
)
from oomdoctor.advisor.vllm_budget import activation_peak
from oomdoctor.advisor.weights import vision_params

TEXT_7B: dict[str, Any] = {
    "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
    "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 128000,
    "torch_dtype": "bfloat16", "tie_word_embeddings": False,
}  # fmt: skip
#: the vision_config fields of Qwen/Qwen2.5-VL-7B-Instruct's config.json
QWEN25_VL_7B: dict[str, Any] = {**TEXT_7B, "model_type": "qwen2_5_vl", "vision_config": {
    "depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
    "in_chans": 3, "out_hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2, "spatial_patch_size": 14,
    "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31], "temporal_patch_size": 2}}  # fmt: skip
#: Qwen/Qwen2-VL-7B-Instruct: embed_dim is the tower's width, hidden_size the merger's output
QWEN2_VL_7B: dict[str, Any] = {**TEXT_7B, "model_type": "qwen2_vl", "vision_config": {
    "depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "in_chans": 3, "hidden_size": 3584,
    "patch_size": 14, "spatial_merge_size": 2, "spatial_patch_size": 14, "temporal_patch_size": 2}}  # fmt: skip


def tower(cfg: dict[str, Any]):  # type: ignore[no-untyped-def]
    v = vision_tower(cfg)
    assert v is not None
    return v


def test_the_towers_read_from_config_json() -> None:
    v25, v2 = tower(QWEN25_VL_7B), tower(QWEN2_VL_7B)
    assert (v25.width, v25.intermediate, v25.gated, v25.out_hidden) == (1280, 3420, True, 3584)
    assert (v2.width, v2.intermediate, v2.gated, v2.out_hidden) == (1280, 5120, False, 3584)
    assert vision_tower({**TEXT_7B, "model_type": "llava", "vision_config": {"hidden_size": 1024}}) is None
    assert geometry_from_config(QWEN25_VL_7B, "t").vision == v25


def test_qwen2_vl_tower_weights_use_embed_dim_not_the_merger_width() -> None:
    """32 × (4·1280² + 2·1280·5120): 0.63 B parameters, not the 4.9 B that hidden_size 3584 gives."""
    assert vision_params(QWEN2_VL_7B["vision_config"]) == 32 * (4 * 1280**2 + 2 * 1280 * 5120)


def test_the_largest_image_is_3584_px_square_and_16384_tokens() -> None:
    """get_image_size_with_most_features: smart_resize(9999999, 9999999, 28, 3136, 12845056)."""
    assert smart_resize(9999999, 9999999, 28, 3136, 12845056) == (3584, 3584)
    v = tower(QWEN25_VL_7B)
    assert item_tokens(v, 1) == (3584 // 14) ** 2 // 4 == 16384
    assert item_tokens(v, 2) == 16384  # two frames make one temporal patch
    assert item_tokens(v, 3) == 32768  # padded to 4 frames
    # transformers' own default max_pixels, 28·28·1280: a 980 px square, 70 × 70 patches
    assert item_tokens(v, 1, max_pixels=1003520) == 70 * 70 // 4 == 1225


@pytest.mark.parametrize(("seq_len", "images", "frames"), [(128000, 1, 12), (32768, 1, 2), (8192, 0, 1),
                                                           (200000, 0, 16), (262144, 1, 16)])
def test_video_frames_as_get_num_frames_with_most_features(seq_len: int, images: int, frames: int) -> None:
    assert video_frames(tower(QWEN25_VL_7B), seq_len, images) == frames


@pytest.mark.parametrize(
    ("max_model_len", "batched", "seqs", "expected"),
    [
        # V1 on an H100 (8192 batched tokens): one 16384-token image, the budget raised to it
        (32768, 8192, 1024, EncoderProfile("image", 1, 16384, 16384)),
        # 128000 tokens: a 12-frame video (98304 tokens) has the most tokens; the dummy video is
        # built for max_num_batched_tokens, where one frame fits (at least one)
        (128000, 8192, 1024, EncoderProfile("video", 1, 16384, 98304)),
        # 65536 batched tokens: 4 images in the budget, 2 per 32768-token prompt
        (32768, 65536, 1024, EncoderProfile("image", 4, 16384, 65536)),
        # a 16384-token context holds one image per prompt; 2 sequences hold 2 of the 4
        (16384, 65536, 2, EncoderProfile("image", 2, 16384, 65536)),
    ],
)
def test_encoder_profile_as_v1_profile_run(max_model_len: int, batched: int, seqs: int,
                                           expected: EncoderProfile) -> None:
    assert encoder_profile(tower(QWEN25_VL_7B), max_model_len, batched, seqs) == expected


def test_encoder_bytes_of_one_largest_image() -> None:
    """65536 patches: fp32 pixels 1176 × 4 B, the MLP's widest point (2·1280 + 3·3420) × 2 B;
    16384 outputs × 3584 × 2 B held in the encoder cache."""
    v = tower(QWEN25_VL_7B)
    enc = encoder_bytes(v, EncoderProfile("image", 1, 16384, 16384))
    pixels = 65536 * 1176 * 4
    assert enc.pass_bytes == pixels + 65536 * (2 * 1280 + 3 * 3420) * 2 == 1_988_624_384
    assert enc.held_bytes == pixels + 16384 * 3584 * 2
    assert "1 image × 16384 tokens (65536 patches" in enc.source
    tp2 = encoder_bytes(v, EncoderProfile("image", 1, 16384, 16384), tp=2)
    assert tp2.pass_bytes == pixels + 65536 * (2 * 1280 + 3 * 3420 // 2) * 2


def test_activation_peak_of_a_vl_model_in_v1_only() -> None:
    geo = geometry_from_config(QWEN25_VL_7B, "t")
    plain = geometry_from_config({**TEXT_7B, "model_type": "qwen2"}, "t")
    text = activation_peak(plain, 8192, 256, 1, (0, 19, 0))
    enc = encoder_bytes(geo.vision, encoder_profile(geo.vision, 32768, 8192, 256))  # type: ignore[arg-type]
    # 0.19.0, 256 sequences: the encoder pass (1.85 GiB) is larger than the text dummy run plus what it holds
    assert activation_peak(geo, 8192, 256, 1, (0, 19, 0), 32768).bytes == enc.pass_bytes > text.bytes + enc.held_bytes
    # 0.10.1, 1024 sequences: the sorting sampler (5.9 GiB) leads, the pixels and outputs stay beside it
    big = activation_peak(geo, 8192, 1024, 1, (0, 10, 1), 32768)
    assert big.bytes == 1024 * 152064 * 38 + enc.held_bytes
    assert "pixels and outputs of the vision encoder profile" in big.source
    # V0 profiles multimodal data otherwise (not modelled): the text model's peak only
    v0 = (0, 7, 3)
    assert activation_peak(geo, 8192, 256, 1, v0, 32768).bytes == activation_peak(plain, 8192, 256, 1, v0).bytes
