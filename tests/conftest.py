"""Shared pytest configuration: hypothesis profiles ("ci" default, "large" via HYPOTHESIS_PROFILE=large)."""

import os

from hypothesis import HealthCheck, settings

# "ci" is derandomized (examples fixed per test) so a landing never depends on luck; "large" explores at random.
settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
settings.register_profile("large", max_examples=500, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
