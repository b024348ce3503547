"""Launch the collective sweep: N local ranks (gloo on CPU, NCCL on GPUs), or join a torchrun job.

On one machine the sampler starts ``num_procs`` copies of
``costmodel.profiling.comm_worker`` with the environment ``torchrun`` would
give them (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``). Across machines, run the same ``parplan profile run --ops
comm`` command under ``torchrun`` on every node; the sampler sees the
torchrun environment and becomes one rank itself (see
``costmodel/profiles/README.md``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from costmodel.profiling.comm_worker import COMM_OPS, run_worker

__all__ = ["CommResult", "run_comm", "under_torchrun"]

_START_GRACE_S = 60.0  # process start, torch import and rendezvous, beyond the budget's deadline


@dataclass(frozen=True)
class CommResult:
    """How the sweep ended: ``error`` is None on success, else one line saying which rank failed and why."""

    ranks: int
    backend: str
    error: str | None = None


def under_torchrun() -> bool:
    """Whether this process is one rank of a ``torchrun`` (torchelastic) job."""
    return "TORCHELASTIC_RUN_ID" in os.environ and "RANK" in os.environ and "WORLD_SIZE" in os.environ


def run_comm(out: Path, device: str, num_procs: int, deadline_epoch: float, message_bytes: tuple[int, int],
             ops: Sequence[str] = COMM_OPS) -> CommResult:
    """Time the collectives over message sizes on ``num_procs`` local ranks (or this torchrun rank).

    Parameters
    ----------
    out : Path
        The profile directory; rank 0 appends to its journal.
    device : str
        ``cpu`` (gloo) or ``cuda`` (NCCL, one GPU per rank).
    num_procs : int
        Local ranks to start (ignored under torchrun).
    deadline_epoch : float
        ``time.time()`` after which rank 0 stops the sweep.
    message_bytes : tuple of int
        Smallest and largest message, bytes.
    """
    backend = "nccl" if device == "cuda" else "gloo"
    if under_torchrun():
        run_worker(str(out), device, deadline_epoch, *message_bytes, ops)
        return CommResult(int(os.environ["WORLD_SIZE"]), backend)
    port = _free_port()
    command = [sys.executable, "-m", "costmodel.profiling.comm_worker", "--out", str(out), "--device", device,
               "--deadline-epoch", repr(deadline_epoch), "--min-bytes", str(message_bytes[0]),
               "--max-bytes", str(message_bytes[1]), "--ops", ",".join(ops)]
    with tempfile.TemporaryDirectory(prefix="parplan-comm-") as logs:
        processes, log_paths, handles = [], [], []
        for rank in range(num_procs):
            env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(num_procs), "LOCAL_RANK": str(rank),
                   "LOCAL_WORLD_SIZE": str(num_procs), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(_root()), os.environ.get("PYTHONPATH")]))}
            log_path = Path(logs) / f"rank{rank}.log"
            log_paths.append(log_path)
            # Rank 0's progress goes to our stderr; the others' output is kept for an error message.
            stderr = None if rank == 0 else log_path.open("w")
            if stderr is not None:
                handles.append(stderr)
            processes.append(subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=stderr))
        try:
            error = _wait(processes, deadline_epoch + _START_GRACE_S, log_paths)
        finally:
            for handle in handles:
                handle.close()
    return CommResult(num_procs, backend, error)


def _wait(processes: list[subprocess.Popen[bytes]], until_epoch: float, logs: list[Path]) -> str | None:
    for rank, process in enumerate(processes):
        try:
            process.wait(timeout=max(1.0, until_epoch - time.time()))
        except subprocess.TimeoutExpired:
            for other in processes:  # only the ranks this call started
                if other.poll() is None:
                    other.terminate()
            for other in processes:
                try:
                    other.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    other.kill()
            return f"rank {rank} did not finish within the budget and was stopped"
    for rank, process in enumerate(processes):
        if process.returncode != 0:
            return f"rank {rank} exited with code {process.returncode}: {_last_line(logs[rank])}"
    return None


def _last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no output"
    return lines[-1] if lines else "no output (see rank 0 above)"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _root() -> Path:
    """The directory holding the ``costmodel`` package, so that the spawned ranks import this copy."""
    return Path(__file__).resolve().parents[2]
