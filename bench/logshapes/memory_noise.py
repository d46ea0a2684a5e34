"""A training job whose log says "memory" on one line in ten, and fails only four times.

A PyTorch (2.0) training script logging with Python's ``logging``: step, data-loader and eval lines,
and on every tenth line something about memory that is not a failure (allocator statistics,
pinned memory, memory-efficient attention, host memory usage, cache eviction). It tests that a
common word costs no more than any other and reports nothing. (The step lines say ``step N``, not
``epoch E step N``: "epoch " is a trigger, and this shape is about the word "memory".) Each failure is the 2.0-era
``torch.cuda.OutOfMemoryError`` (``(GPU 0; ... total capacity; ...)``) in the forward pass, then
the job restarted by its scheduler.
"""

from __future__ import annotations

from random import Random

from logshapes import Shape, fill, iso_ts

SITE = "/opt/conda/lib/python3.10/site-packages"


def startup(rng: Random, sec: int) -> list[str]:
    t = iso_ts(sec)
    return [
        f"{t} - INFO - main - torch 2.0.1+cu118, CUDA 11.8, 1 x NVIDIA A10G (23.69 GiB)",
        f"{t} - INFO - main - config: model=vit_huge_patch14, batch_size=64, lr=1e-4, epochs=90, amp=True",
        f"{t} - INFO - data - train: 1,281,167 images, val: 50,000 images, 12 workers",
        f"{t} - INFO - model - 632,045,032 parameters (632.0M), 2.53 GB in float32",
    ]


def _memory_line(rng: Random, t: str, step: int) -> str:
    a = rng.uniform(14, 19)
    kind = rng.randrange(6)
    if kind == 0:
        return (f"{t} - INFO - trainer - cuda memory: allocated {a:.2f} GiB, reserved {a + 1.3:.2f} GiB, "
                f"max allocated {a + 2.1:.2f} GiB")
    if kind == 1:
        return f"{t} - INFO - data - pin_memory=True: {rng.randint(40, 90)} batches in pinned memory"
    if kind == 2:
        return f"{t} - DEBUG - attention - using memory-efficient attention for {rng.choice(('train', 'eval'))} step {step}"
    if kind == 3:
        used = rng.uniform(40, 95)
        return f"{t} - WARNING - monitor - host memory usage at {used / 1.28:.1f}% ({used:.1f} GiB / 128.0 GiB)"
    if kind == 4:
        return f"{t} - DEBUG - cache - evicted {rng.randint(1, 30)} shards to free host memory ({rng.uniform(0.1, 3):.1f} GiB)"
    return f"{t} - INFO - checkpoint - memory snapshot every 1000 steps; next at step {step + 1000 - step % 1000}"


def step(rng: Random, sec: int) -> list[str]:
    """Ten lines (the clock's second is the step), one of them about memory."""
    t = iso_ts(sec * 0.41)
    out = []
    for i in range(9):
        if i % 3 == 2:
            out.append(f"{t} - DEBUG - data - worker {rng.randrange(12)} prefetched batch {sec * 3 + i} "
                       f"({rng.randint(60, 64)} samples, {rng.uniform(20, 90):.1f} ms)")
        else:
            out.append(f"{t} - INFO - trainer - step {sec} loss {rng.uniform(0.8, 6.9):.4f} "
                       f"lr {1e-4 * (1 - sec / 2e6):.3e} grad_norm {rng.uniform(0.2, 3):.3f} "
                       f"throughput {rng.uniform(380, 430):.1f} samples/s")
    out.insert(rng.randrange(10), _memory_line(rng, t, sec))
    return out


def traffic(rng: Random, sec: int, target: int) -> tuple[bytes, int]:
    return fill(rng, sec, target, step)


def failure(rng: Random, k: int) -> list[str]:
    tried = [2.00, 1.12, 4.00, 768.00][k]
    unit = "MiB" if k == 3 else "GiB"
    frames = [
        ("/job/train.py", 311, "<module>", "main(args)"),
        ("/job/train.py", 287, "main", "loss = train_one_epoch(model, loader, optimizer, scaler, epoch)"),
        ("/job/train.py", 142, "train_one_epoch", "output = model(images)"),
        (f"{SITE}/torch/nn/modules/module.py", 1501, "_call_impl", "return forward_call(*args, **kwargs)"),
        (f"{SITE}/timm/models/vision_transformer.py", 651, "forward", "x = self.forward_features(x)"),
        (f"{SITE}/timm/models/vision_transformer.py", 636, "forward_features", "x = self.blocks(x)"),
        (f"{SITE}/timm/models/vision_transformer.py", 121, "forward", "x = x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))"),
        (f"{SITE}/timm/layers/mlp.py", 46, "forward", "x = self.act(x)"),
    ]
    out = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        out += [f'  File "{path}", line {line}, in {func}', f"    {code}"]
    out.append(
        f"torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried:.2f} {unit} (GPU 0; 23.69 GiB "
        f"total capacity; 19.43 GiB already allocated; {[1.02, 0.57, 2.11, 0.31][k]:.2f} GiB free; 21.80 GiB reserved "
        f"in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid "
        f"fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
    )
    return [*out, f"srun: error: gpu-node-{k:02d}: task 0: Exited with exit code 1", *startup(rng, 0)]


SHAPE = Shape(
    name="memory-noise",
    about='"memory" on 10 % of lines, no failure',
    head=startup,
    traffic=traffic,
    failure=failure,
    expect="torch.cuda-oom",
)
