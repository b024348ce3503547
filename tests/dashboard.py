"""optuna-dashboard served on 127.0.0.1 for a test, and its JSON API read back."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> dict:
    """The JSON at ``url`` (127.0.0.1 only)."""
    with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 - 127.0.0.1 only
        return json.loads(r.read())


@contextmanager
def dashboard(storage: str) -> Iterator[tuple[str, list[dict]]]:
    """Serve ``storage`` with optuna-dashboard; yield its API base URL and its study summaries."""
    pytest.importorskip("optuna_dashboard")
    port = _free_port()
    serve = f"import optuna_dashboard; optuna_dashboard.run_server({storage!r}, host='127.0.0.1', port={port})"
    proc = subprocess.Popen([sys.executable, "-c", serve], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}/api"
        for _ in range(150):
            try:
                studies = get(f"{base}/studies")["study_summaries"]
                break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("optuna-dashboard did not answer")
        yield base, studies
    finally:
        proc.terminate()
        proc.wait(timeout=10)
