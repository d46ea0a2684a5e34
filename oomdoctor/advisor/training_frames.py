"""What a traceback's training frames say (rules/training.toml `deepspeed.zero-frame`,
`torch.optimizer-step-frame`, `torch.ddp-reducer-frame`): the failing allocation is training state (ZeRO partitions, optimizer
states), and the ZeRO stage where the file names it."""

from __future__ import annotations

from typing import Any

#: ZeRO source files and the stage they run: stage_1_and_2.py serves stages 1 and 2 alike
_FRAME_STAGE = {"stage3": "3", "partition_parameters": "3", "stage_1_and_2": "1 or 2"}


def frame_stage(extra: dict[str, Any]) -> str | None:
    """The ZeRO stage a traceback frame names ("3" or "1 or 2"), or None without a ZeRO frame."""
    return _FRAME_STAGE.get(str(extra.get("zero_frame") or ""))


def shows_training_state(extra: dict[str, Any]) -> bool:
    """A ZeRO optimizer frame, an optimizer-step frame or DDP's gradient buckets is in the log."""
    return frame_stage(extra) is not None or bool(extra.get("optimizer_frame") or extra.get("gradient_frame"))
