"""Shared fixtures: tiny random models built once per session (see tiny_models.py)."""

import pytest

from tiny_models import make_tiny_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """tiny_model(arch) -> Path of a saved tiny model, built once per session and arch."""
    built = {}

    def get(arch: str):
        if arch not in built:
            built[arch] = make_tiny_model(tmp_path_factory, arch)
        return built[arch]

    return get


@pytest.fixture(scope="session")
def make_tiny(tmp_path_factory):
    """make_tiny(arch, max_shard_size=None) -> Path of a freshly built tiny model."""
    return lambda arch, max_shard_size=None: make_tiny_model(tmp_path_factory, arch, max_shard_size)
