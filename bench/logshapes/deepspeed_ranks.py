"""DeepSpeed training on 8 GPUs under ``torchrun --role rank --tee 3``: every line behind ``[rankN]:``.

torchrun's tee prefixes each worker's output with its role and local rank, so every line of every
rank reads ``[rank3]:...``. Rank 0 prints DeepSpeed's step lines (``log_dist`` and the throughput
timer, ``steps_per_print=1``); every rank prints the training script's own step line. Each failure
is ``torch.OutOfMemoryError`` in the backward pass told by all eight ranks at once (their
tracebacks interleaved, each rank naming its own GPU), torchrun's child-failure report, then a
restart.
"""

from __future__ import annotations

from random import Random

from logshapes import Shape, fill, iso_ts

RANKS = 8
SITE = "/usr/local/lib/python3.10/dist-packages"


def startup(rng: Random, sec: int) -> list[str]:
    t = iso_ts(sec)
    out = [
        f"W0819 08:00:00.{sec % 1000:03d}000 140031 torch/distributed/run.py:792] ",
        "W0819 08:00:00.000000 140031 torch/distributed/run.py:792] *****************************************",
        "W0819 08:00:00.000000 140031 torch/distributed/run.py:792] Setting OMP_NUM_THREADS environment variable "
        "for each process to be 1 in default, to avoid your system being overloaded, please further tune the "
        "variable for optimal performance in your application as needed. ",
        "W0819 08:00:00.000000 140031 torch/distributed/run.py:792] *****************************************",
    ]
    for r in range(RANKS):
        out.append(f"[rank{r}]:[{t}] [INFO] [real_accelerator.py:219:get_accelerator] Setting ds_accelerator to cuda (auto detect)")
    for r in range(RANKS):
        out.append(f"[rank{r}]:[{t}] [INFO] [comm.py:652:init_distributed] cdb=None")
    out.append(f"[rank0]:[{t}] [INFO] [comm.py:683:init_distributed] Initializing TorchBackend in DeepSpeed with backend nccl")
    out += [
        f"[rank0]:[{t}] [INFO] [logging.py:128:log_dist] [Rank 0] DeepSpeed info: version=0.15.4, git-hash=unknown, git-branch=unknown",
        f"[rank0]:[{t}] [INFO] [config.py:733:__init__] Config mesh_device None world_size = 8",
        f"[rank0]:[{t}] [INFO] [logging.py:128:log_dist] [Rank 0] Creating ZeRO Offload",
        f"[rank0]:[{t}] [INFO] [stage3.py:173:__init__] Reduce bucket size 16777216",
        f"[rank0]:[{t}] [INFO] [utils.py:781:see_memory_usage] Stage 3 initialize beginning",
        f"[rank0]:[{t}] [INFO] [utils.py:782:see_memory_usage] MA 15.53 GB         Max_MA 15.53 GB         CA 15.6 GB         Max_CA 16 GB ",
        f"[rank0]:[{t}] [INFO] [utils.py:789:see_memory_usage] CPU Virtual Memory:  used = 98.12 GB, percent = 9.7%",
        f"[rank0]:[{t}] [INFO] [logging.py:128:log_dist] [Rank 0] DeepSpeed Final Optimizer = DeepSpeedZeroOptimizer_Stage3",
        f"[rank0]:[{t}] [INFO] [config.py:1003:print] DeepSpeedEngine configuration:",
        f"[rank0]:[{t}] [INFO] [config.py:1007:print]   train_micro_batch_size_per_gpu  4",
        f"[rank0]:[{t}] [INFO] [config.py:1007:print]   gradient_accumulation_steps  4",
        f"[rank0]:[{t}] [INFO] [config.py:1007:print]   zero_optimization_stage ...... 3",
        f"[rank0]:[{t}] [INFO] [config.py:1007:print]   steps_per_print .............. 1",
    ]
    return out


def step(rng: Random, sec: int) -> list[str]:
    """One optimisation step (the clock's second is the step number)."""
    t = iso_ts(sec * 1.37)
    out = [
        f"[rank0]:[{t}] [INFO] [logging.py:128:log_dist] [Rank 0] step={sec}, skipped=0, "
        f"lr=[{2e-5 * (1 - sec / 400_000):.16g}], mom=[(0.9, 0.95)]",
        f"[rank0]:[{t}] [INFO] [timer.py:264:stop] epoch=0/micro_step={4 * sec}/global_step={sec}, "
        f"RunningAvgSamplesPerSec={rng.uniform(20, 30):.15g}, CurrSamplesPerSec={rng.uniform(18, 32):.15g}, "
        f"MemAllocated=15.61GB, MaxMemAllocated={rng.uniform(60, 70):.2f}GB",
    ]
    for r in rng.sample(range(RANKS), RANKS):  # ranks finish the step in no fixed order
        out.append(
            f"[rank{r}]:{t} - train.py:188 - INFO - step {sec} | loss {rng.uniform(1.2, 2.6):.4f} | "
            f"tokens/s {rng.randint(2900, 3400)} | rank {r}"
        )
    return out


def traffic(rng: Random, sec: int, target: int) -> tuple[bytes, int]:
    return fill(rng, sec, target, step)


def failure(rng: Random, k: int) -> list[str]:
    frames = [
        ("/workspace/train.py", 201, "<module>", "main()"),
        ("/workspace/train.py", 176, "main", "engine.backward(loss)"),
        (f"{SITE}/deepspeed/utils/nvtx.py", 18, "wrapped_fn", "ret_val = func(*args, **kwargs)"),
        (f"{SITE}/deepspeed/runtime/engine.py", 2213, "backward", "self.optimizer.backward(loss, retain_graph=retain_graph)"),
        (f"{SITE}/deepspeed/runtime/zero/stage3.py", 2265, "backward", "self.loss_scaler.backward(loss.float(), retain_graph=retain_graph)"),
        (f"{SITE}/deepspeed/runtime/fp16/loss_scaler.py", 63, "backward", "scaled_loss.backward(retain_graph=retain_graph)"),
        (f"{SITE}/torch/_tensor.py", 581, "backward", "torch.autograd.backward("),
        (f"{SITE}/torch/autograd/graph.py", 825, "_engine_run_backward", "return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass"),
    ]
    tried = [1.96, 3.91, 1.96, 7.83][k]
    per_rank: list[list[str]] = []
    for r in range(RANKS):
        free = rng.choice((0.98, 1.02, 1.13, 1.21, 0.87))
        lines = ["Traceback (most recent call last):"]
        for path, line, func, code in frames:
            lines += [f'  File "{path}", line {line}, in {func}', f"    {code}"]
        lines.append(
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried:.2f} GiB. GPU {r} has a total "
            f"capacity of 79.33 GiB of which {free:.2f} GiB is free. Process {41000 + 10 * k + r} has 78.30 GiB memory "
            f"in use. Of the allocated memory 74.66 GiB is allocated by PyTorch, and 2.14 GiB is reserved by PyTorch "
            f"but unallocated. If reserved but unallocated memory is large try setting "
            f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
            f"Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        )
        per_rank.append([f"[rank{r}]: {x}" for x in lines])
    out: list[str] = []
    # the ranks' stderr reaches the tee in chunks: interleave a few lines at a time
    pos = [0] * RANKS
    while any(p < len(per_rank[r]) for r, p in enumerate(pos)):
        r = rng.randrange(RANKS)
        n = rng.randint(1, 5)
        out += per_rank[r][pos[r] : pos[r] + n]
        pos[r] += n
    pid = 41000 + 10 * k
    out += [
        f"W0819 1{k}:00:01.000000 140031 torch/distributed/elastic/multiprocessing/api.py:897] Sending process "
        f"{pid + r} closing signal SIGTERM"
        for r in range(1, RANKS)
    ]
    out += [
        f"E0819 1{k}:00:02.000000 140031 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
        f"local_rank: 0 (pid: {pid}) of binary: /usr/bin/python3",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "train.py FAILED",
        "------------------------------------------------------------",
    ]
    return out + startup(rng, 0)


SHAPE = Shape(
    name="deepspeed-ranks",
    about="DeepSpeed, 8 ranks behind `[rankN]:`",
    head=startup,
    traffic=traffic,
    failure=failure,
    expect="torch.cuda-oom",
)
