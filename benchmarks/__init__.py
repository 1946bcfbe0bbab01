"""Benchmarks of compiled rpn2c specs against hand-written torch/PyG modules: ``python -m benchmarks --help``."""
