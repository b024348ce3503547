"""Where a study's problems run: joblib's process pool on this machine, or an existing dask cluster.

``loky`` (the default) is joblib's reusable process pool: one pool for the
whole run, whose worker processes keep the fitted predictors and the storage
connections they loaded from one problem to the next. ``dask`` hands the same
tasks to a running ``distributed`` scheduler through joblib's dask backend
(``pip install 'parplan[dask]'``); its workers need this package, the profile
and the study's storage (use a shared ``--storage postgresql://...`` when they
run on other machines: the default SQLite file lives in the output folder).
The PostgreSQL ``parplan study worker`` processes are a third way, apart from
this module.

Nothing here imports ``distributed`` until a dask run asks for it, so that
parsing ``parplan study run`` stays cheap.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

from costmodel.specs.errors import SpecError

BACKENDS: Final = ("loky", "dask")
CONNECT_TIMEOUT_S: Final = 10.0
"""How long a dask run waits to reach its scheduler before the run fails (nothing is written before)."""
INSTALL_HINT: Final = "pip install 'parplan[dask]'"


WORKER_MEMORY_GROWTH_BYTES: Final = 2 * 1024**3
"""How far a loky worker's memory may grow past its size after its first problem before loky replaces it.

Loky takes a worker that grew by 300 MB for a leak and replaces it (``_MAX_MEMORY_LEAK_SIZE`` in
``joblib/externals/loky/process_executor.py``, joblib 1.4-1.5). A study worker grows that much by design: the
fitted predictors of each GPU kind and its bounded caches (operator timings, placements, check memos), and a
replacement starts cold. In ``benchmarks/study.py --problems 1000`` on 2 cores, loky replaced workers three
times, and the run took 404 s wall and 0.70 s CPU per problem; with this limit no worker was replaced, and it
took 328 s and 0.57 s (one session, back to back)."""


def keep_worker_caches() -> None:
    """Let this loky worker grow by ``WORKER_MEMORY_GROWTH_BYTES`` before loky replaces it (a study worker's
    caches are bounded, not a leak). Harmless anywhere else: it only raises a module constant of loky."""
    try:
        from joblib.externals.loky import process_executor
    except ImportError:  # another joblib layout: its own limit stands
        return
    limit = getattr(process_executor, "_MAX_MEMORY_LEAK_SIZE", None)
    if isinstance(limit, int) and limit < WORKER_MEMORY_GROWTH_BYTES:
        process_executor._MAX_MEMORY_LEAK_SIZE = WORKER_MEMORY_GROWTH_BYTES  # noqa: SLF001 - no public setting


def check_backend(backend: str, scheduler: str | None) -> None:
    """Refuse an unknown backend, a scheduler without dask, dask without a scheduler (one-line ``SpecError``)."""
    if backend not in BACKENDS:
        raise SpecError("backend", backend, f"one of {', '.join(BACKENDS)}")
    if backend == "dask" and not scheduler:
        raise SpecError("scheduler", scheduler, "a dask scheduler address such as tcp://host:8786 with backend dask")
    if backend != "dask" and scheduler is not None:
        raise SpecError("scheduler", scheduler, "only with backend dask (the loky pool runs on this machine)")


LOCAL_HOSTS: Final = ("127.0.0.1", "localhost", "[::1]", "::1")


def check_storage_reachable(backend: str, scheduler: str | None, storage: str | None) -> None:
    """Refuse a dask scheduler on another machine with a SQLite store: its workers cannot reach the file.

    A remote worker would open (or create) a SQLite file of the same path on its own disk, so trials and
    claims would scatter over machines and a rerun could not resume. A scheduler on this machine
    (``inproc://``, ``127.0.0.1``, ``localhost``) shares the disk and may use SQLite.
    """
    if backend != "dask" or scheduler is None or (storage is not None and not storage.startswith("sqlite")):
        return
    scheme, _, location = scheduler.partition("://")
    host = location.rsplit(":", 1)[0] if location else ""
    if scheme == "inproc" or host in LOCAL_HOSTS:
        return
    raise SpecError("storage", storage or "the output folder's study.db (SQLite)",
                    f"a database every dask worker reaches, e.g. --storage postgresql://USER@HOST/DB, with the "
                    f"scheduler {scheduler[:60]} on another machine")


@contextmanager
def study_backend(backend: str, scheduler: str | None = None) -> Iterator[dict[str, Any]]:
    """Connect to the backend and yield the ``joblib.Parallel`` settings its tasks run under.

    Raises
    ------
    SpecError
        If the backend is unknown, dask is asked for but ``distributed`` is not installed, or the
        scheduler cannot be reached within :data:`CONNECT_TIMEOUT_S`.
    """
    check_backend(backend, scheduler)
    if backend == "loky":
        yield {"backend": "loky"}
        return
    client = _connect(str(scheduler))
    try:
        from joblib import parallel_config

        with parallel_config(backend="dask", client=client):
            yield {}  # the backend comes from parallel_config, with its client
    finally:
        client.close()


def _connect(scheduler: str) -> Any:
    """A ``distributed.Client`` of ``scheduler``."""
    try:
        from distributed import Client
    except ImportError:
        raise SpecError("backend", "dask", f"loky, or dask once distributed is installed ({INSTALL_HINT})") from None
    from distributed.comm import parse_address
    from distributed.comm.addressing import parse_host_port
    from distributed.comm.registry import backends as schemes

    allowed = "a dask scheduler address SCHEME://HOST:PORT"
    try:  # checked before a Client exists: one made of a bad address hangs ~20 s when collected
        scheme, location = parse_address(scheduler)
        if scheme != "inproc":  # inproc://... (a cluster in this process) has no port
            parse_host_port(location)
    except ValueError as exc:
        raise SpecError("scheduler", scheduler, f"{allowed} ({_first_line(exc)})") from None
    if scheme not in schemes:
        raise SpecError("scheduler", scheduler, f"{allowed}, SCHEME one of {', '.join(sorted(schemes))}")
    try:
        return Client(scheduler, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:  # refused, unresolvable, timed out
        raise SpecError("scheduler", scheduler, f"a running dask scheduler ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
