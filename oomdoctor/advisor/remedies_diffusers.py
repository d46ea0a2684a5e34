"""diffusers remedies (read from the diffusers 0.21.0 sdist and the 0.36.0 wheel).

``AutoencoderKL.decode`` -> ``_decode`` turns the whole latent into an image in one pass; at a large
resolution its up-sampling blocks are the peak. ``vae.enable_tiling()`` sets ``use_tiling`` and
``_decode`` then calls ``tiled_decode``, which decodes overlapping tiles of ``tile_sample_min_size``
pixels and blends them (0.21.0 ``models/autoencoder_kl.py``, 0.36.0 ``models/autoencoders/vae.py``
``AutoencoderMixin.enable_tiling``). The pipeline's own ``enable_vae_tiling()`` calls it, and is
deprecated from 0.36.0 (removal announced for 0.40.0), so the VAE's method is the one given.
"""

from __future__ import annotations

from oomdoctor.advisor.prescription import remedy_text
from oomdoctor.advisor.registry import AdviceInput, remedy
from oomdoctor.report import Remedy

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
