"""CPU miniatures for the replay what-if benchmark: a small transformer's training step, profiled.

Each rank runs ``layers`` pre-norm transformer blocks (LayerNorm, QKV, causal SDPA, output
projection, GELU MLP) on ``batch`` sequences per rank, its gradients flattened and all-reduced
over gloo on the main thread after the backward (data parallel, one bucket, no overlap), then an
SGD step. One torch thread per rank. torch.profiler records CPU operators with shapes, one
``ProfilerStep#N`` per step, and writes ``rank{r}.json`` per rank.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

HIDDEN, SEQ, HEADS = 128, 64, 4
WAIT, WARMUP, ACTIVE = 1, 2, 6


@dataclass(frozen=True)
class Config:
    """One miniature: transformer blocks, gloo ranks, sequences per rank."""

    layers: int
    world: int
    batch: int

    @property
    def name(self) -> str:
        return f"L{self.layers}-dp{self.world}-b{self.batch}"


def _model(layers: int):  # type: ignore[no-untyped-def]
    import torch
    from torch import nn
    from torch.nn import functional

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(HIDDEN), nn.LayerNorm(HIDDEN)
            self.qkv, self.out = nn.Linear(HIDDEN, 3 * HIDDEN), nn.Linear(HIDDEN, HIDDEN)
            self.up, self.down = nn.Linear(HIDDEN, 4 * HIDDEN), nn.Linear(4 * HIDDEN, HIDDEN)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, d = x.shape
            q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
            a = functional.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
            x = x + self.out(a)
            return x + self.down(functional.gelu(self.up(self.n2(x))))

    torch.manual_seed(0)
    return nn.Sequential(*[Block() for _ in range(layers)])


def record(config: Config, rank: int, out: Path) -> Path:
    """Profile ``WAIT + WARMUP + ACTIVE`` steps of one rank; return its trace (rank{rank}.json in ``out``)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    model = _model(config.layers)
    optimiser = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(config.batch, SEQ, HIDDEN, generator=torch.Generator().manual_seed(rank))
    params = list(model.parameters())
    schedule = torch.profiler.schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE)
    path = out / f"rank{rank}.json"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True,
                                schedule=schedule) as prof:
        for _ in range(WAIT + WARMUP + ACTIVE):
            optimiser.zero_grad()
            model(x).square().mean().backward()
            if config.world > 1:
                flat = torch.cat([p.grad.reshape(-1) for p in params])
                dist.all_reduce(flat)
                flat /= config.world
                offset = 0
                for p in params:
                    p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
                    offset += p.numel()
            optimiser.step()
            prof.step()
    prof.export_chrome_trace(str(path))
    return path


def _worker(rank: int, config: Config, out: str, port: int) -> None:
    import torch.distributed as dist

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    dist.init_process_group("gloo", rank=rank, world_size=config.world)
    try:
        record(config, rank, Path(out))
    finally:
        dist.destroy_process_group()


def record_config(config: Config, out: Path, port: int) -> Path:
    """Record every rank of ``config`` into ``out`` (one process per rank when ``world`` > 1); rank 0's trace."""
    out.mkdir(parents=True, exist_ok=True)
    if config.world == 1:
        return record(config, 0, out)
    import torch.multiprocessing as mp

    mp.spawn(_worker, args=(config, str(out), port), nprocs=config.world, join=True)
    return out / "rank0.json"
