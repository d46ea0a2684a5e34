"""Causes and first remedies that say only what the log shows: the gap of a PyTorch OOM and the share
of a small card outside the allocator, a bare CUDA runtime OOM (no size: a call outside the caching
allocator), and a JAX buffer the message sizes but does not shape."""

from __future__ import annotations

from oomdoctor.advisor.account import unaccounted
from tests.engines_util import diagnose, diagnose_text, only_error, remedy, remedy_ids

GiB, MiB = 2**30, 2**20

#: corpus fresh-060 (tune): PyTorch 2.3's message quoted with a Markdown "> "
_FRESH_060 = (
    "> torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity of "
    "21.99 GiB of which 759.38 MiB is free. Including non-PyTorch memory, this process has 0 bytes memory in use. Of "
    "the allocated memory 20.52 GiB is allocated by PyTorch, and 102.08 MiB is reserved by PyTorch but unallocated. If "
    "reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
    "fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
#: corpus fresh-089 (tune): only the figures of PyTorch <= 2.0's message, on a 2 GB card
_FRESH_089 = ("Tried to allocate 20.00 MiB (GPU 0; 1.96 GiB total capacity; 1.24 GiB already allocated; 2.88 MiB free; "
              "1.25 GiB reserved in total by PyTorch)")
#: c10's C10_CUDA_CHECK text (torch 2.x, with its hints) under a backward pass of a plain script
_RUNTIME = """Traceback (most recent call last):
  File "/home/user/train.py", line 120, in <module>
    loss.backward()
  File "/usr/lib/python3/dist-packages/torch/_tensor.py", line 522, in backward
    torch.autograd.backward(
RuntimeError: CUDA error: out of memory
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1.
Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.
"""


def test_the_cause_states_the_gap_between_request_and_free() -> None:
    """896.00 MiB requested, 759.38 MiB free: 136.62 MiB short, said after the cause's own words."""
    f = only_error(diagnose_text(_FRESH_060))
    assert f.cause is not None and f.cause.id == "activation-peak"
    assert f.cause.summary == ("The GPU is full (20.62 GiB held by this process on 21.99 GiB); the next activation of "
                               "896.00 MiB does not fit. 896.00 MiB requested with 759.38 MiB free: 136.62 MiB short.")


def test_nothing_free_adds_no_gap_sentence() -> None:
    """fresh-088's "0 bytes free": the request is the gap, already in the summary."""
    text = ("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 6.00 GiB total capacity; 5.17 GiB "
            "already allocated; 0 bytes free; 5.26 GiB reserved in total by PyTorch)")
    f = only_error(diagnose_text(text))
    assert f.cause is not None and "short" not in f.cause.summary


def test_a_quarter_of_a_small_card_outside_the_allocator_is_named() -> None:
    """fresh-089: 1.96 GiB − 2.88 MiB free − 1.25 GiB reserved = 724.16 MiB outside PyTorch's allocator,
    37 % of the card (below the 2 GiB floor, above a quarter of it): named, and the first remedy looks first."""
    f = only_error(diagnose_text(_FRESH_089))
    assert f.cause is not None and f.cause.id == "activation-peak"
    assert "20.00 MiB requested with 2.88 MiB free: 17.12 MiB short." in f.cause.summary
    assert ("724.16 MiB of the GPU is held outside PyTorch's allocator (1.96 GiB − 2.88 MiB free − 1.25 GiB reserved "
            "by PyTorch)") in f.cause.summary
    assert f.remedies[0].id == "torch.reduce-batch"
    assert f.remedies[0].run[0].command == "nvidia-smi --query-compute-apps=pid,used_memory --format=csv"


def test_the_small_card_share_leaves_a_context_sized_gap_alone() -> None:
    """A CUDA context's few hundred MiB stays unnamed: 400 MiB of a 2 GiB card (19.5 %) and 1.5 GiB of a
    24 GiB card (6.25 %, below the 2 GiB floor) are not named; 2.5 GiB of 24 GiB is."""
    small = {"total_bytes": 2 * GiB, "free_bytes": 0, "reserved_bytes": 2 * GiB - 400 * MiB}
    assert unaccounted(small) is None
    big = {"total_bytes": 24 * GiB, "free_bytes": 0, "reserved_bytes": 24 * GiB - 1536 * MiB}
    assert unaccounted(big) is None
    over = {"total_bytes": 24 * GiB, "free_bytes": 0, "reserved_bytes": 24 * GiB - 2560 * MiB}
    gap = unaccounted(over)
    assert gap is not None and gap.gap == 2560 * MiB


def test_a_bare_runtime_oom_is_a_call_outside_the_allocator_and_the_first_step_looks() -> None:
    """c10's "CUDA error: out of memory" (no size) in a plain script's backward pass: not "activations of
    the current batch" (the allocator would have said "Tried to allocate"); the first remedy is nvidia-smi
    and CUDA_LAUNCH_BLOCKING=1 (the variable the message itself names), before any batch or precision knob."""
    f = only_error(diagnose_text(_RUNTIME))
    assert (f.rule, f.phase) == ("torch.cuda-runtime-oom", "training")
    assert f.cause is not None and f.cause.id == "unknown"
    assert f.cause.summary.startswith("A CUDA call outside PyTorch's caching allocator ran out of memory")
    assert f.cause.summary.endswith("The message does not say which call failed.")
    first = f.remedies[0]
    assert first.id == "ask.runtime-call"
    assert first.env == {"CUDA_LAUNCH_BLOCKING": "1"} and [s.command for s in first.run] == ["nvidia-smi"]
    assert remedy_ids(f)[1:3] == ["training.gradient-checkpointing", "torch.reduce-batch"]


def test_thc_storage_and_the_driver_api_keep_their_own_causes() -> None:
    """THC's "at .../THCStorage.cu" allocates a tensor's storage (other-066: activation-peak), the
    driver-API check is the expandable segments' path (driver-fault): neither gets the runtime look."""
    thc = only_error(diagnose_text("RuntimeError: cuda runtime error (2) : out of memory at "
                                   "/data/conda-bld/pytorch-0.1.5/work/torch/lib/THC/generic/THCStorage.cu:65"))
    assert thc.cause is not None and thc.cause.id == "activation-peak"
    assert "ask.runtime-call" not in remedy_ids(thc)
    drv = only_error(diagnose_text("RuntimeError: CUDA driver error: out of memory"))
    assert drv.cause is not None and drv.cause.id == "driver-fault"
    assert "ask.runtime-call" not in remedy_ids(drv)


def test_a_jax_buffer_without_a_shape_is_not_called_activations() -> None:
    """A JAX training step (train_step, jax.grad) failing on a 3.00 GiB buffer, no shape and no GPU size:
    the cause is neutral about what the buffer holds; JAX's pool share (0.75 by default) is raised first,
    then the batch is halved in the user's code; unified memory does not claim the buffer exceeds the GPU."""
    f = only_error(diagnose("jax/synthetic-request-oom.log"))
    assert f.phase == "training" and f.cause is not None and f.cause.id == "activation-peak"
    assert f.cause.summary == ("An XLA buffer of 3.00 GiB did not fit in the memory left to JAX; the log does not show "
                               "what the buffer holds (a step's activations, gradients or optimizer state).")
    assert remedy_ids(f)[:3] == ["xla.mem-fraction", "xla.reduce-batch", "xla.unified-memory"]
    assert f.remedies[0].env == {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.95"}
    assert remedy(f, "xla.reduce-batch").settings == {"batch_size": "half of the current value"}
    assert remedy(f, "xla.unified-memory").why.startswith("The log does not show the GPU's size, so whether one buffer")


def test_a_jax_buffer_outside_a_training_step_gets_no_batch_remedy() -> None:
    """The same RESOURCE_EXHAUSTED with no frame (phase unknown): nothing in the log shows a batch."""
    f = only_error(diagnose_text("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while "
                                 "trying to allocate 3743729664 bytes."))
    assert f.phase == "unknown"
    assert "xla.reduce-batch" not in remedy_ids(f)
    assert remedy_ids(f)[0] == "xla.mem-fraction"
