"""Shared pytest configuration: hypothesis profiles ("ci" default, "large" via HYPOTHESIS_PROFILE=large)."""

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

# "ci" is derandomized (examples fixed per test) so a landing never depends on luck; "large" explores at random.
settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
settings.register_profile("large", max_examples=500, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _single_thread():
    """Tests use tiny float64 tensors: intra-op threads only add contention (a 24-element layer_norm took ~20 ms
    multi-threaded on a loaded 2-core machine). The previous thread count is restored after each test."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
