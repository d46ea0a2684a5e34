"""diffusers remedies (read from the diffusers 0.21.0 sdist and the 0.36.0 wheel).

``AutoencoderKL.decode`` -> ``_decode`` turns the whole latent into an image in one pass; at a large
resolution its up-sampling blocks are the peak. ``vae.enable_tiling()`` sets ``use_tiling`` and
``_decode`` then calls ``tiled_decode``, which decodes overlapping tiles of ``tile_sample_min_size``
pixels and blends them (0.21.0 ``models/autoencoder_kl.py``, 0.36.0 ``models/autoencoders/vae.py``
``AutoencoderMixin.enable_tiling``). The pipeline's own ``enable_vae_tiling()`` calls it, and is
deprecated from 0.36.0 (removal announced for 0.40.0), so the VAE's method is the one given.
"""

from __future__ import annotations

from oomdoctor.advisor._engine_util import product_of
from oomdoctor.advisor.prescription import remedy_text
from oomdoctor.advisor.registry import AdviceInput, remedy
from oomdoctor.i18n import join_sentences
from oomdoctor.report import Remedy, RunStep

MiB = 2**20

#: the setting, as the knob catalog lists it (rules/advice/knobs.toml [diffusers])
TILING = "pipe.vae.enable_tiling()"


@remedy("diffusers.vae-tiling")
def vae_tiling(inp: AdviceInput) -> Remedy | None:
    """The VAE decoded the latents in one piece (its ``decode``/``_decode`` frame, not ``tiled_decode``)."""
    frame = inp.context.extra.get("vae_decode_frame")
    if frame not in ("decode", "_decode"):
        return None
    return Remedy(
        id="diffusers.vae-tiling",
        title=remedy_text("diffusers.vae-tiling", "title"),
        settings={TILING: remedy_text("diffusers.vae-tiling", "when")},
        fits=None,
        confidence="medium",
        why=remedy_text("diffusers.vae-tiling", "why"),
        sources={"decode": "traceback frame"},
    )


# --- Stable Diffusion WebUI Forge ---------------------------------------------------------------
# Its own memory knobs (github lllyasviel/stable-diffusion-webui-forge at dfdcbab6, 2025-06):
# - "GPU Weights (MB)": the slider at the top of the page (modules_forge/main_entry.py); what is
#   not given to the weights is forge_inference_memory, the memory for computation (1024 MB by
#   default, modules_forge/shared_options.py); weights beyond it are swapped to the CPU;
# - --always-offload-from-vram (backend/args.py): unload models from VRAM after use, what Forge
#   itself tells users of the removed --lowvram/--medvram to use (modules_forge/initialization.py);
# - --cuda-malloc (backend/args.py): PyTorch's cudaMallocAsync backend (modules_forge/cuda_malloc.py).

FORGE = "sd-webui-forge"
#: Forge's slider, as its page labels it
GPU_WEIGHTS = "GPU Weights (MB)"
#: the computation memory is at least doubled, and grows by at least this much (MiB): Forge's own default
FORGE_INFERENCE_STEP_MB = 1024


def _show_vram_users() -> RunStep:
    """nvidia-smi's own table: on Windows (WDDM) it lists the graphics processes holding VRAM too,
    which the compute-apps query leaves out."""
    return RunStep(label=remedy_text("ask.launch-facts", "step"), command="nvidia-smi")


def _forge(inp: AdviceInput) -> bool:
    return product_of(inp) == FORGE


@remedy("forge.gpu-weights")
def forge_gpu_weights(inp: AdviceInput) -> Remedy | None:
    """Less of the GPU for the weights Forge keeps resident, more for computation."""
    if not _forge(inp):
        return None
    weights = inp.context.extra.get("forge_weights_bytes")
    compute = inp.context.extra.get("forge_inference_bytes")
    if isinstance(weights, int) and isinstance(compute, int):
        weights_mb, compute_mb = weights // MiB, compute // MiB
        more = max(compute_mb, FORGE_INFERENCE_STEP_MB)
        value = weights_mb - more
        if value <= 0:
            return None
        return Remedy(
            id="forge.gpu-weights",
            title=remedy_text("forge.gpu-weights", "title_sized", value=value),
            settings={GPU_WEIGHTS: str(value)},
            confidence="medium",
            why=join_sentences([remedy_text("forge.gpu-weights", "why_sized", weights=weights_mb, compute=compute_mb,
                                            more=more, value=value, after=compute_mb + more),
                                remedy_text("forge.gpu-weights", "why_others")]),
            run=[_show_vram_users()],
            sources={"weights": "log ([GPU Setting])", "compute": "log ([GPU Setting])"},
        )
    return Remedy(
        id="forge.gpu-weights",
        title=remedy_text("forge.gpu-weights", "title"),
        settings={GPU_WEIGHTS: remedy_text("forge.gpu-weights", "value_unknown", step=FORGE_INFERENCE_STEP_MB)},
        confidence="medium",
        run=[_show_vram_users()],
        why=join_sentences([remedy_text("forge.gpu-weights", "why"), remedy_text("forge.gpu-weights", "why_others")]),
    )


@remedy("forge.always-offload-from-vram")
def forge_offload(inp: AdviceInput) -> Remedy | None:
    if not _forge(inp):
        return None
    return Remedy(
        id="forge.always-offload-from-vram",
        title=remedy_text("forge.always-offload-from-vram", "title"),
        flags={"--always-offload-from-vram": ""},
        confidence="medium",
        why=remedy_text("forge.always-offload-from-vram", "why"),
    )


@remedy("forge.cuda-malloc")
def forge_cuda_malloc(inp: AdviceInput) -> Remedy | None:
    if not _forge(inp):
        return None
    return Remedy(
        id="forge.cuda-malloc",
        title=remedy_text("forge.cuda-malloc", "title"),
        flags={"--cuda-malloc": ""},
        confidence="low",
        why=remedy_text("forge.cuda-malloc", "why"),
    )


@remedy("forge.resolution-batch")
def forge_resolution_batch(inp: AdviceInput) -> Remedy | None:
    if not _forge(inp):
        return None
    return Remedy(
        id="forge.resolution-batch",
        title=remedy_text("forge.resolution-batch", "title"),
        settings={"Batch size": "1", "Width × Height": remedy_text("forge.resolution-batch", "resolution")},
        confidence="medium",
        why=remedy_text("forge.resolution-batch", "why"),
    )
