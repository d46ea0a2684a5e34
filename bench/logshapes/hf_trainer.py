"""Hugging Face Trainer fine-tuning: tqdm progress redrawn with ``\\r``, a loss dict every 10 steps.

``python train.py ... 2>&1 | tee train.log``: tqdm redraws its bar with a carriage return on every
step and never ends it with a newline, so between two newlines there are ten bars and then
``tqdm.write`` of the ``{'loss': ...}`` dict that the Trainer logs every ``logging_steps=10``. Each
failure is the traceback of ``trainer.train()`` ending in ``torch.OutOfMemoryError`` in the
backward pass, written straight after the last bar, then the run resumed from its checkpoint.
"""

from __future__ import annotations

from random import Random

from logshapes import Shape

TOTAL = 19_500
SITE = "/opt/conda/lib/python3.11/site-packages"


def startup(rng: Random, sec: int) -> list[str]:
    return [
        "[INFO|configuration_utils.py:765] 2024-08-19 08:00:02,118 >> Model config LlamaConfig {",
        '  "architectures": ["LlamaForCausalLM"],',
        '  "hidden_size": 4096,',
        '  "num_hidden_layers": 32,',
        '  "torch_dtype": "bfloat16",',
        "}",
        "Loading checkpoint shards: 100%|██████████| 4/4 [00:06<00:00,  1.52s/it]",
        "[INFO|trainer.py:2405] 2024-08-19 08:00:31,902 >> ***** Running training *****",
        "[INFO|trainer.py:2406] 2024-08-19 08:00:31,902 >>   Num examples = 52,002",
        "[INFO|trainer.py:2407] 2024-08-19 08:00:31,902 >>   Num Epochs = 3",
        "[INFO|trainer.py:2408] 2024-08-19 08:00:31,902 >>   Instantaneous batch size per device = 8",
        "[INFO|trainer.py:2411] 2024-08-19 08:00:31,902 >>   Total train batch size (w. parallel, distributed & accumulation) = 8",
        "[INFO|trainer.py:2412] 2024-08-19 08:00:31,902 >>   Gradient Accumulation steps = 1",
        f"[INFO|trainer.py:2413] 2024-08-19 08:00:31,902 >>   Total optimization steps = {TOTAL:,}",
        "[INFO|trainer.py:2414] 2024-08-19 08:00:31,903 >>   Number of trainable parameters = 6,738,415,616",
    ]


def _interval(sec: int) -> str:
    """tqdm's ``format_interval``: ``mm:ss``, or ``h:mm:ss`` from an hour on."""
    h, m, s = sec // 3600, sec // 60 % 60, sec % 60
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def _bar(step: int, sec: float, rate: float) -> str:
    frac = step / TOTAL
    filled = int(frac * 10)
    bar = "█" * filled + " " * (10 - filled)
    return (
        f"\r{int(frac * 100):3d}%|{bar}| {step}/{TOTAL} [{_interval(int(sec))}<"
        f"{_interval(int((TOTAL - step) * rate))}, {rate:5.2f}s/it]"
    )


def _ten_steps(rng: Random, step: int) -> str:
    """Ten redraws of the bar, the cleared bar, the loss dict, the bar drawn again (one line)."""
    rate = rng.uniform(1.8, 2.4)
    parts = [_bar(step + i, (step + i) * 2.1, rate) for i in range(1, 11)]
    loss = rng.uniform(0.6, 2.2)
    logs = (
        f"{{'loss': {loss:.4f}, 'grad_norm': {rng.uniform(0.2, 3.0):.16f}, "
        f"'learning_rate': {2e-5 * (1 - (step + 10) / TOTAL):.16g}, 'epoch': {3 * (step + 10) / TOTAL:.2f}}}"
    )
    return "".join(parts) + "\r" + " " * 70 + "\r" + logs


def traffic(rng: Random, sec: int, target: int) -> tuple[bytes, int]:
    """``sec`` counts optimisation steps here; the bar goes round when it reaches the end."""
    lines: list[str] = []
    size = 0
    while size < target:
        step = sec % (TOTAL - 10)
        line = _ten_steps(rng, step)
        lines.append(line)
        size += len(line.encode()) + 1
        sec += 10
    return ("\n".join(lines) + "\n").encode(), sec


def failure(rng: Random, k: int) -> list[str]:
    step = 4000 * (k + 1) + 3
    tried = [3.91, 1.96, 7.83, 980.00][k]
    unit = "MiB" if k == 3 else "GiB"
    free = [1.26, 0.88, 2.71, 0.41][k]
    frames = [
        ("/workspace/train.py", 212, "<module>", "trainer.train(resume_from_checkpoint=args.resume)"),
        (f"{SITE}/transformers/trainer.py", 2241, "train", "return inner_training_loop("),
        (f"{SITE}/transformers/trainer.py", 2548, "_inner_training_loop", "tr_loss_step = self.training_step(model, inputs, num_items_in_batch)"),
        (f"{SITE}/transformers/trainer.py", 3740, "training_step", "self.accelerator.backward(loss, **kwargs)"),
        (f"{SITE}/accelerate/accelerator.py", 2329, "backward", "loss.backward(**kwargs)"),
        (f"{SITE}/torch/_tensor.py", 626, "backward", "torch.autograd.backward("),
        (f"{SITE}/torch/autograd/__init__.py", 347, "backward", "_engine_run_backward("),
        (f"{SITE}/torch/autograd/graph.py", 823, "_engine_run_backward", "return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass"),
    ]
    out = [_bar(step, step * 2.1, 2.08) + "Traceback (most recent call last):"]
    for path, line, func, code in frames:
        out.append(f'  File "{path}", line {line}, in {func}')
        out.append(f"    {code}")
    out.append(
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried:.2f} {unit}. GPU 0 has a total capacity "
        f"of 79.14 GiB of which {free:.2f} GiB is free. Including non-PyTorch memory, this process has 77.86 GiB "
        f"memory in use. Of the allocated memory 71.02 GiB is allocated by PyTorch, and 5.33 GiB is reserved by "
        f"PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
        f"Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )
    return [
        *out,
        *startup(rng, 0),
        f"[INFO|trainer.py:2553] 2024-08-19 1{k}:00:00,000 >> Continuing training from checkpoint, will skip to saved global_step",
    ]


SHAPE = Shape(
    name="hf-trainer",
    about="HF Trainer, tqdm `\\r` + loss dicts",
    head=startup,
    traffic=traffic,
    failure=failure,
    expect="torch.cuda-oom",
)
