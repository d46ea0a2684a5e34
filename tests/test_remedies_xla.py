"""JAX/TF remedies: allocator environment variables and the batch from the tensor shape."""

from __future__ import annotations

from tests.engines_util import diagnose, only_error, remedy, remedy_ids


def test_jax_env_remedies() -> None:
    f = only_error(diagnose("jax/other-039.log"))
    assert remedy(f, "xla.mem-fraction").env == {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.95"}
    assert remedy(f, "xla.preallocate-false").env == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    assert remedy(f, "xla.allocator-platform").env == {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}


def test_tf_batch_from_shape_and_no_jax_env() -> None:
    f = only_error(diagnose("tensorflow/other-041.log"))
    assert remedy(f, "xla.reduce-batch").settings == {"batch_size": "8"}
    assert remedy(f, "tf.memory-growth").env == {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    assert not any(i.startswith("xla.mem") or i.startswith("xla.pre") for i in remedy_ids(f))
