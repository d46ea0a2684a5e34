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
    MllamaVision,
    encoder_bytes,
    encoder_profile,
    item_tokens,
    llava_v0_profile,
    mllama_profile,
    mllama_vision,
    qwen_vl_v0_profile,
    smart_resize,
    v0_encoder_bytes,
    video_frames,
    vision_tower,
)
from oomdoctor.advisor.vllm_budget import activation_peak, batched_tokens
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
    # V0 0.7.3 at 8192 batched tokens: one dummy sequence of 8192 tokens cannot hold a 16384-token
    # image and a video, so it carries neither: the text model's peak only
    v0 = (0, 7, 3)
    assert activation_peak(geo, 8192, 256, 1, v0, 32768).bytes == activation_peak(plain, 8192, 256, 1, v0).bytes


def test_the_v1_encoder_term_carries_its_floor_and_why() -> None:
    """The V1 encoder's bytes are an estimate no log has confirmed: the term carries the text model's
    own peak as its floor, so fit cannot say "does not fit" on the encoder alone."""
    geo = geometry_from_config(QWEN25_VL_7B, "t")
    plain = geometry_from_config(TEXT_7B, "t")
    term = activation_peak(geo, 8192, 256, 1, (0, 10, 1), 32768)
    assert term.floor == activation_peak(plain, 8192, 256, 1, (0, 10, 1)).bytes < term.bytes
    assert term.unverified.startswith("the vision encoder's share of the profile (Qwen2-VL family, V1)")
    assert activation_peak(plain, 8192, 256, 1, (0, 10, 1)).floor is None


# -- mllama (Llama-3.2-Vision) on V0's encoder-decoder profile run ------------------------------------

#: the fields of meta-llama/Llama-3.2-11B-Vision's config.json that the profile reads
MLLAMA_11B: dict[str, Any] = {"model_type": "mllama", "torch_dtype": "bfloat16", "text_config": {
    "model_type": "mllama_text_model", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 40,
    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
    "cross_attention_layers": [3, 8, 13, 18, 23, 28, 33, 38], "torch_dtype": "bfloat16"}, "vision_config": {
    "hidden_size": 1280, "intermediate_size": 5120, "num_hidden_layers": 32, "num_global_layers": 8,
    "attention_heads": 16, "image_size": 560, "patch_size": 14, "max_num_tiles": 4, "num_channels": 3,
    "intermediate_layers_indices": [3, 7, 15, 23, 30], "vision_output_dim": 7680, "hidden_act": "gelu"}}  # fmt: skip
GiB = 2**30


def mllama() -> MllamaVision:
    v = mllama_vision(MLLAMA_11B)
    assert v is not None
    return v


def test_mllama_tower_from_config_json() -> None:
    v = mllama()
    assert (v.width, v.intermediate, v.saved_layers, v.text_hidden, v.text_q, v.text_kv) == (1280, 5120, 5, 4096, 4096, 1024)
    assert v.tile_patches == 1601  # (560 / 14)² + the class token
    assert v.image_tokens == 4 * 1608  # padded to a multiple of 8 per tile
    assert geometry_from_config(MLLAMA_11B, "t").mllama == v
    assert mllama_vision(QWEN25_VL_7B) is None and geometry_from_config(QWEN25_VL_7B, "t").mllama is None


def test_mllama_profile_of_128_images_stage_by_stage() -> None:
    """S = 128 × 6432 × 1280 × 2 B, mask = 128 × 6432² × 2 B, pixels = 2 × 128 × 4 × 3 × 560² × 4 B;
    the global transformer holds (2·5 + 5)·S and its MLP 2 × 4·S: 58.60 GiB."""
    prof = mllama_profile(mllama(), 128, 0)
    s, mask, pixels = 128 * 6432 * 1280 * 2, 128 * 6432**2 * 2, 2 * 128 * 4 * 3 * 560**2 * 4
    assert prof.images == 128
    assert prof.stages["global transformer"] == pixels + mask + 15 * s + 8 * s == 62920065024
    assert prof.peak == ("global transformer", 62920065024)
    assert prof.stages["local transformer"] == pixels + mask + 8 * s + 8 * s
    assert prof.stages["projector"] == pixels + 128 * 4 * 1601 * (7680 + 4096) * 2


def test_mllama_profile_against_vllm_025_patch_embedding() -> None:
    """Corpus vllm-025 (vLLM 0.6.3, Llama-3.2-11B-Vision-Instruct, TP 2, A10, 256 sequences by
    default): the OOM asks 1.95 GiB, the patch embedding's output N·T·1600·(1280/2)·2 B, with 20.90
    GiB allocated beside 10.0714 GiB of weights. The formula's bytes in use before that output
    (two fp32 pixel copies, their bf16 copy and its unfold): 10.77 GiB against 10.83 (−0.6 %)."""
    prof = mllama_profile(mllama(), 256, 0, tp=2)
    out = 256 * 4 * 1600 * 640 * 2
    assert f"{out / GiB:.2f}" == "1.95"
    before = prof.stages["patch embedding"] - out
    pix = 256 * 4 * 3 * 560**2
    assert before == 2 * pix * 4 + 2 * pix * 2 == 11560550400
    logged = 20.90 - 10.0714
    assert abs(before / GiB - logged) / logged < 0.01
    assert prof.peak[1] > 22.09 * GiB  # the whole profile cannot fit the A10 either


def test_mllama_profile_against_vllm_049() -> None:
    """Corpus vllm-049 (Llama-3.2-11B-Vision, --max-num-seqs 128, H100) printed an activation peak of
    36.63 GiB. The formula gives 58.60 GiB for the 128 images V0's runner profiles (+60 %). No run of
    that code with 128 four-tile images can peak at 36.63: in the global transformer the stacked
    intermediate states (5·S), fc1 and its GELU (8·S), the MLP's input and residual (2·S) and the mask
    are needed at once, 39.3 GiB. The same formula at 80 images gives 36.62 GiB."""
    v = mllama()
    s, mask = 128 * 6432 * 1280 * 2, 128 * 6432**2 * 2
    assert (15 * s + mask) / GiB > 36.63
    assert f"{mllama_profile(v, 128, 0).peak[1] / GiB:.2f}" == "58.60"
    assert f"{mllama_profile(v, 80, 0).peak[1] / GiB:.2f}" == "36.62"


def test_activation_peak_uses_the_mllama_profile_on_v0_only() -> None:
    geo = geometry_from_config(MLLAMA_11B, "t")
    term = activation_peak(geo, 65536, 128, 1, (0, 7, 0), 65536)
    assert term.bytes == 62920065024 and "128 dummy images" in term.source
    assert activation_peak(geo, 65536, 128, 1, None, 65536).bytes == 62920065024  # mllama runs on V0
    assert activation_peak(geo, 65536, 128, 1, (0, 10, 0), 65536).bytes < 10 * GiB  # not read: text only


def test_fit_of_vllm_049s_command_and_its_max_num_seqs() -> None:
    """fit with vllm-049's settings: V0 leaves chunked prefill off for a multimodal model (65536 tokens
    per step), the profile is the 128 images' 58.60 GiB, and the remedy is the largest
    --max-num-seqs whose profile leaves one 65536-token request its KV cache (87), not fewer tokens.
    That command started (vllm-049): "does not fit" rests on the unverified encoder term alone, so
    the verdict is uncertain and every remedy one step less confident."""
    from oomdoctor.advisor.catalog import find_gpu
    from oomdoctor.advisor.fit import fit

    res = fit(geometry_from_config(MLLAMA_11B, "config.json (t)"), find_gpu("H100"), max_model_len=65536,
              version="0.7.0", enforce_eager=True, max_num_seqs_given=128)
    assert res.activation == 62920065024
    assert not res.fits and res.verdict == "uncertain"
    first = res.remedies[0]
    assert (first.id, first.flags, first.fits, first.confidence) == (
        "vllm.max-num-seqs", {"--max-num-seqs": "87"}, True, "low")
    assert all(r.id != "vllm.max-num-batched-tokens" for r in res.remedies)
    assert [r.rank for r in res.remedies] == list(range(1, len(res.remedies) + 1))


def _fit_049(version: str | None, seqs: int = 128, **kw: Any) -> Any:
    from oomdoctor.advisor.catalog import find_gpu
    from oomdoctor.advisor.fit import fit

    return fit(geometry_from_config(MLLAMA_11B, "config.json (t)"), find_gpu("H100"), max_model_len=65536,
               version=version, enforce_eager=True, max_num_seqs_given=seqs, **kw)


def test_vllm_049_is_uncertain_not_does_not_fit() -> None:
    """vllm-049 printed no version and started (14.65 GiB of KV cache). As modelled its KV budget is
    negative; with the text model's own peak (65536 × (3·14336 + 3·4096) × 2 B = 6.75 GiB) instead
    of the encoder term it would be 44.92 GiB, more than one request's 10 GiB: uncertain, naming the
    term, the log that disagrees, and that the version is unknown."""
    res = _fit_049(None)
    assert res.kv_budget < 0 < res.kv_needed <= res.kv_budget_floor
    assert res.activation_floor == 65536 * (3 * 14336 + 3 * 4096) * 2 == 7247757312
    assert res.kv_budget_floor == int(res.total_bytes * 0.9) - res.weights - res.activation_floor - res.non_torch
    assert res.verdict == "uncertain" and not res.fits
    assert res.uncertain.startswith("mllama's vision-encoder profile: only its image count and pixel copies")
    assert "36.63 GiB where this formula gives 58.60 GiB" in res.uncertain
    assert res.uncertain.endswith("; and the vLLM version is not known")
    out = res.to_dict()
    assert (out["fits"], out["verdict"], out["activation_floor_bytes"]) == (None, "uncertain", 7247757312)
    assert [r["confidence"] for r in out["remedies"]][:1] == ["low"]


@pytest.mark.parametrize(("version", "tail"), [
    ("0.7.0", "58.60 GiB"),  # a release whose source was read: the log's disagreement only
    ("v0.6.6.post1", "58.60 GiB"),
    ("0.6.7.dev12+gabc1234", "; and this vLLM is a build between releases"),
    ("0.7.0rc1", "; and this vLLM is a build between releases"),
    ("0.6.4", "; and vLLM 0.6.4 is not a release whose source was read"),
])
def test_the_unverified_term_says_why_for_the_version(version: str, tail: str) -> None:
    res = _fit_049(version)
    assert res.verdict == "uncertain" and res.uncertain.endswith(tail)


def test_does_not_fit_stands_where_the_text_model_alone_leaves_too_little() -> None:
    """On a 24 GiB card the weights (19.38 GiB) and the text model's own peak already leave no room:
    the verdict does not rest on the encoder term, so it stays "does not fit"."""
    res = _fit_049(None, total_bytes=24 * GiB)
    assert res.kv_budget_floor is None and res.uncertain == "" and res.verdict == "does not fit"
    assert res.to_dict()["fits"] is False


def test_a_modelled_fit_needs_no_caveat() -> None:
    res = _fit_049(None, 16)  # 16 images: 7.33 GiB at the global transformer
    assert res.fits and res.verdict == "fits" and res.uncertain == ""


def test_fit_cli_exits_3_when_uncertain(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from oomdoctor.cli import main

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(MLLAMA_11B), "utf-8")
    args = ["fit", "--model-config", str(cfg), "--max-model-len", "65536", "--enforce-eager", "--max-num-seqs"]
    assert main([*args, "128", "--gpu", "H100"]) == 3
    assert "UNCERTAIN: as modelled, one 65536-token request needs 10.00 GiB of KV cache" in " ".join(
        capsys.readouterr().out.split())
    assert main([*args, "128", "--gpu-memory", "24GiB"]) == 1
    assert main([*args, "16", "--gpu", "H100"]) == 0


def test_is_release() -> None:
    from oomdoctor.advisor.memory_model import is_release

    assert [is_release(v) for v in ("0.7.0", "v0.6.6.post1", "0.8", "0.6.7.dev12+gabc", "0.7.0rc1", "", None)] == [
        True, True, True, False, False, False, False]


# -- LLaVA-1.5, LLaVA-NeXT and Qwen2-VL on V0's decoder-only profile run --------------------------

#: llava-hf/llava-1.5-7b-hf's config.json: a llama text_config that leaves its shapes to transformers'
#: LlamaConfig defaults, and CLIP ViT-L/14 at 336 px
LLAVA_15_7B: dict[str, Any] = {
    "architectures": ["LlavaForConditionalGeneration"], "image_token_index": 32000, "model_type": "llava",
    "projector_hidden_act": "gelu", "tie_word_embeddings": False, "torch_dtype": "float16",
    "text_config": {"_name_or_path": "lmsys/vicuna-7b-v1.5", "architectures": ["LlamaForCausalLM"],
                    "max_position_embeddings": 4096, "model_type": "llama", "rms_norm_eps": 1e-05,
                    "torch_dtype": "float16", "vocab_size": 32064},
    "vision_config": {"hidden_size": 1024, "image_size": 336, "intermediate_size": 4096,
                      "model_type": "clip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 24,
                      "patch_size": 14, "projection_dim": 768, "vocab_size": 32000},
    "vision_feature_layer": -2, "vision_feature_select_strategy": "default", "vocab_size": 32064}  # fmt: skip
#: llava-hf/llava-v1.6-mistral-7b-hf's config.json (mistral text_config, anyres pinpoints up to 672²)
LLAVA_NEXT_MISTRAL_7B: dict[str, Any] = {
    **LLAVA_15_7B, "architectures": ["LlavaNextForConditionalGeneration"], "model_type": "llava_next",
    "image_grid_pinpoints": [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]],
    "torch_dtype": "float16", "use_image_newline_parameter": True,
    "text_config": {"_name_or_path": "mistralai/Mistral-7B-Instruct-v0.2", "architectures": ["MistralForCausalLM"],
                    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
                    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": None,
                    "torch_dtype": "bfloat16", "vocab_size": 32064}}  # fmt: skip


def test_a_llava_config_takes_transformers_text_defaults() -> None:
    """The published LLaVA configs leave the text shapes to LlamaConfig / MistralConfig's defaults."""
    g = geometry_from_config(LLAVA_15_7B, "t")
    assert (g.layers, g.hidden, g.intermediate_size, g.kv_heads, g.max_position_embeddings) == (32, 4096, 11008, 32, 4096)
    n = geometry_from_config(LLAVA_NEXT_MISTRAL_7B, "t")
    assert (n.layers, n.hidden, n.intermediate_size, n.kv_heads, n.max_position_embeddings) == (32, 4096, 14336, 8, 32768)
    assert n.sliding_window is None and g.multimodal and n.multimodal
    assert n.name == "t"  # the model served, not mistralai/Mistral-7B-Instruct-v0.2 its text_config names
    assert not geometry_from_config(TEXT_7B, "t").multimodal


def test_clip_towers_and_their_largest_item() -> None:
    """LLaVA-1.5: (336/14)² = 576 features (the class token dropped), one crop. LLaVA-NeXT: the
    672 × 672 pinpoint (2 × 2 crops) has the most, 576 + 48·48 + 48 newlines = 2928, in 1 + 4 crops;
    336 × 1008 gives 576 + 24·72 + 24 = 2328."""
    t15 = geometry_from_config(LLAVA_15_7B, "t").llava
    assert t15 is not None and (t15.width, t15.intermediate, t15.crop_tokens, t15.largest) == (1024, 4096, 577, (576, 1))
    nx = geometry_from_config(LLAVA_NEXT_MISTRAL_7B, "t").llava
    assert nx is not None and nx.largest == (2928, 5)
    assert nx.anyres_tokens(336, 1008) == 576 + 24 * 72 + 24 == 2328
    assert nx.best_grid(448, 448) == (2, 2)  # 0.6.x's 448-px dummy image picks the same grid
    assert geometry_from_config(QWEN25_VL_7B, "t").llava is None


def test_v0_gives_a_multimodal_model_at_least_5120_batched_tokens() -> None:
    """config.py ``_MULTIMODAL_MODEL_MAX_NUM_BATCHED_TOKENS`` (0.6.3–0.7.3), with or without chunked prefill."""
    assert batched_tokens((0, 7, 0), 80 * GiB, None, 4096, multimodal=True).bytes == 5120
    assert batched_tokens((0, 6, 3), 80 * GiB, None, 4096, chunked_prefill=True, multimodal=True).bytes == 5120
    assert batched_tokens((0, 7, 0), 80 * GiB, None, 4096).bytes == 4096
    assert batched_tokens((0, 7, 0), 80 * GiB, None, 32768, multimodal=True).bytes == 32768
    assert batched_tokens((0, 10, 1), 80 * GiB, None, 4096, multimodal=True).bytes == 8192  # V1: unchanged


def test_llava_v0_profile_and_bytes() -> None:
    """LLaVA-1.5-7B, 4096 tokens: 5120 batched tokens // 576 = 8 dummy sequences of one image each;
    the peak is the text model's 5120-token forward plus the pixels and projected outputs it holds."""
    geo = geometry_from_config(LLAVA_15_7B, "t")
    t = geo.llava
    assert t is not None
    prof = llava_v0_profile(t, 5120, 256)
    assert (prof.seqs, prof.max_mm_tokens, prof.tokens) == (8, 576, 8 * 576)
    enc = v0_encoder_bytes(t, prof)
    pixels, outputs = 8 * 3 * 336**2 * 4, 8 * 576 * 4096 * 2
    assert enc.pass_bytes == pixels + 8 * 577 * (2 * 1024 + 2 * 4096) * 2 == 105373696
    assert enc.held_bytes == pixels + outputs == 48586752
    text = 5120 * (3 * 11008 + 3 * 4096) * 2
    term = activation_peak(geo, 5120, 256, 1, (0, 7, 0), 4096)
    assert (term.bytes, term.floor) == (text + enc.held_bytes, text) == (512581632, 463994880)
    assert "8 dummy sequence(s), 8 × image of 576 tokens" in term.source
    assert term.unverified.startswith("the vision encoder's share of V0's profile run")
    assert activation_peak(geo, 5120, 256, 1, (0, 6, 4), 4096).unverified.endswith(
        "; and vLLM 0.6.4 is not a release whose source was read")
    assert activation_peak(geo, 5120, 256, 1, (0, 7, 0), 4096, release=False).unverified.endswith(
        "; and this vLLM is a build between releases")


def test_llava_next_v0_profile() -> None:
    """LLaVA-NeXT-Mistral-7B at 32768 tokens: 32768 // 2928 = 11 images, 55 CLIP crops."""
    t = geometry_from_config(LLAVA_NEXT_MISTRAL_7B, "t").llava
    assert t is not None
    prof = llava_v0_profile(t, 32768, 256)
    assert (prof.seqs, prof.items[0].count, prof.items[0].crops) == (11, 11, 5)
    enc = v0_encoder_bytes(t, prof)
    pixels = 55 * 3 * 336**2 * 4
    assert enc.pass_bytes == pixels + 55 * 577 * 10240 * 2 == 724444160
    assert enc.held_bytes == pixels + 11 * 2928 * 4096 * 2 == 338359296
    assert llava_v0_profile(t, 32768, 4).seqs == 4  # --max-num-seqs caps it
    assert llava_v0_profile(t, 2048, 256).seqs == 1  # at least one, even past the batch


@pytest.mark.parametrize(("version", "max_model_len", "seqs", "items", "dropped"), [
    # 0.6.3: images only, max_pixels capped at 1280·28² (980² px, 1225 tokens); max_mm = 1225 + 1225
    ((0, 6, 3), 32768, 13, (("image", 13, 1225),), False),
    ((0, 6, 3), 128000, 52, (("image", 52, 1225),), False),
    # 0.6.6.post1: images only at 3584² px (16384 tokens); max_mm = 16384 + 16384 (the video's one pair)
    ((0, 6, 6), 32768, 1, (("image", 1, 16384),), False),
    ((0, 6, 6), 128000, 3, (("image", 3, 16384),), False),
    # 0.7.0: an image and a video; at 32768, 3 frames made 4 → 32768 video tokens: 49152 > 32768,
    # the dummy carries neither ("context length too short"); at 128000, 13 frames made 14 (7 × 16384)
    ((0, 7, 0), 32768, 1, (), True),
    ((0, 7, 0), 128000, 1, (), True),
    # 0.7.3: frames padded to pairs; 2 frames (16384) fit beside the image at 32768, 12 at 128000
    ((0, 7, 3), 32768, 1, (("image", 1, 16384), ("video", 1, 16384)), False),
    ((0, 7, 3), 128000, 1, (("image", 1, 16384), ("video", 1, 98304)), False),
    ((0, 7, 2), 32768, 1, (), True),  # unread: the rule of 0.7.0, the latest read before it
])
def test_qwen2_vl_v0_profile_by_release(version: tuple[int, int, int], max_model_len: int, seqs: int,
                                        items: tuple[tuple[str, int, int], ...], dropped: bool) -> None:
    v = tower(QWEN2_VL_7B)
    prof = qwen_vl_v0_profile(v, version, max_model_len, max(max_model_len, 5120), 256)
    assert (prof.seqs, tuple((i.modality, i.count, i.tokens) for i in prof.items), prof.dropped) == (
        seqs, items, dropped)


def test_qwen2_vl_v0_bytes_and_the_text_only_profile() -> None:
    """0.7.0 at 32768 tokens profiles the text model alone (no floor: nothing unverified is added);
    0.6.6.post1 runs one 16384-token image: its encoder pass (as V1's estimate) beside nothing else."""
    geo = geometry_from_config(QWEN2_VL_7B, "t")
    plain = geometry_from_config({**TEXT_7B, "model_type": "qwen2"}, "t")
    text = activation_peak(plain, 32768, 256, 1, (0, 7, 0))
    t070 = activation_peak(geo, 32768, 256, 1, (0, 7, 0), 32768)
    assert t070.bytes == text.bytes and t070.floor is None
    assert "too short for their images and videos (49152 tokens), so they carry none (vLLM 0.7.0 rule)" in t070.source
    v = tower(QWEN2_VL_7B)
    one = encoder_bytes(v, EncoderProfile("image", 1, 16384, 0))
    t066 = activation_peak(geo, 32768, 256, 1, (0, 6, 6), 32768)
    text066 = activation_peak(plain, 32768, 256, 1, (0, 6, 6)).bytes
    assert t066.bytes == max(one.pass_bytes, text066 + one.held_bytes) and t066.floor == text066
