"""One fake process group of the matrix's world size for every consumer that asks torch.distributed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conformance.matrix import WORLD


@pytest.fixture(scope="session")
def fake_world() -> Iterator[None]:
    """``torch.distributed`` initialised on PyTorch's fake backend: ranks, world size and device meshes
    of ``WORLD`` ranks without GPUs or peers (collectives are no-ops)."""
    dist = pytest.importorskip("torch.distributed")
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=0, world_size=WORLD, store=FakeStore())
    yield
    dist.destroy_process_group()
