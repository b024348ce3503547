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


@pytest.fixture(scope="session")
def deepspeed_world(fake_world: None) -> None:
    """deepspeed.comm over the fake process group (DeepSpeedConfig asks it for the rank)."""
    comm = pytest.importorskip("deepspeed.comm")
    comm.init_distributed(dist_backend="fake", auto_mpi_discovery=False, rank=0, world_size=WORLD)


@pytest.fixture(autouse=True)
def transformer_engine_of_the_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """megatron-core asks the installed Transformer Engine's version (MoE x fp8 needs >= 1.7); the CPU
    has none, the launch does (Megatron-LM trains fp8 only through it), so the checks see a current one."""
    import importlib.util

    if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
        return
    from megatron.core.transformer import transformer_config

    monkeypatch.setattr(transformer_config, "is_te_min_version", lambda version, check_equality=True: True)
