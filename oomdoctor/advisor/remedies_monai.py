"""MONAI remedies (monai 1.5.1 ``monai/inferers/utils.py``, read from the wheel).

``sliding_window_inference(inputs, roi_size, sw_batch_size, predictor, ..., sw_device=None,
device=None, ...)`` stitches the windows' predictions into an output buffer of the whole volume
(``output_image_list.append(torch.zeros(output_shape, ..., device=device))`` and its
``count_map_list``) on ``device``, by default the device of ``inputs``. Its docstring: "If for example
set to device=torch.device('cpu') the gpu memory consumption is less and independent of the
`inputs` and `roi_size`"; ``sw_device`` keeps the windows themselves on the GPU ("Typically,
``sw_device`` is ``cuda`` and ``device`` is ``cpu``"). Both keywords are in every release the
frame appears in (the failing line passes ``device=device``).
"""

from __future__ import annotations

from oomdoctor.advisor.prescription import remedy_text
from oomdoctor.advisor.registry import AdviceInput, remedy
from oomdoctor.report import Remedy


@remedy("monai.output-device")
def output_device(inp: AdviceInput) -> Remedy | None:
    """The stitched output of sliding_window_inference failed to allocate: keep it in host memory."""
    frame = inp.context.extra.get("sw_output_frame")
    if not frame:
        return None
    req = inp.fig("requested_bytes")
    return Remedy(
        id="monai.output-device",
        title=remedy_text("monai.output-device", "title"),
        settings={"sw_device": "cuda", "device": "cpu"},
        saves_bytes=req,
        # the failing allocation is that buffer: on the host it needs no GPU memory at all
        fits=True if req else None,
        confidence="high",
        why=remedy_text("monai.output-device", "why" if req else "why_unsized", buffer=frame, request=req),
        sources={"buffer": "traceback frame"} | ({"request": "message"} if req else {}),
    )
