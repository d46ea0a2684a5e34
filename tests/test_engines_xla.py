"""JAX/XLA and TensorFlow allocator exhaustion."""

from __future__ import annotations

from tests.engines_util import diagnose, only_error


def test_corpus_jax_buffer_assignment() -> None:
    r = diagnose("jax/other-039.log")
    f = only_error(r)
    assert (f.kind, f.engine) == ("xla.resource-exhausted", "jax")
    assert f.figures == {
        "requested_bytes": 4770354232,
        "parameter_allocation_bytes": 390867190,
        "constant_allocation_bytes": 49664,
        "maybe_live_out_allocation_bytes": 10350871183,
        "preallocated_temp_allocation_bytes": 4767413699,
        "total_allocation_bytes": 15504831939,
        "total_fragmentation_bytes": 713346253,
    }


def test_corpus_tensorflow_bfc_summary_and_shape() -> None:
    f = only_error(diagnose("tensorflow/other-041.log"))
    assert (f.rule, f.kind, f.engine) == ("tf.bfc-stats-oom", "xla.resource-exhausted", "tensorflow")
    assert f.figures["limit_bytes"] == 10625279591
    assert f.figures["in_use_bytes"] == 7350513920
    assert f.figures["max_in_use_bytes"] == 7464792320
    assert f.figures["max_alloc_size_bytes"] == 3656908800
    assert f.figures["tensor_shape"] == [16, 1, 892800, 8, 4, 2, 2]
    assert f.figures["gpu_index"] == 0


def test_jax_request_wording_and_training_phase() -> None:
    f = only_error(diagnose("jax/synthetic-request-oom.log"))
    assert f.figures == {"requested_bytes": 3221225472, "gpu_index": 0}
    assert f.phase == "training"
