"""SearchProgress: GPU count i/n, trial k/total, elapsed and best so far on a terminal; silent elsewhere."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from costmodel.progress import ERASE
from search.progress import SearchProgress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _result(num_gpus: int, step_time_s: float) -> SimpleNamespace:  # the two fields of a SearchResult it reads
    return SimpleNamespace(best=SimpleNamespace(step_time_s=step_time_s), problem=SimpleNamespace(num_gpus=num_gpus))


def _budget_search(progress: SearchProgress, now: list[float]) -> None:
    progress.counts(2)
    for num_gpus in (8, 16):
        progress.start(num_gpus)
        for k in range(1, 21):
            now[0] += 0.01
            progress.trial(k, 20)
        progress.finished(_result(num_gpus, 1.25))
    progress.close()


@pytest.mark.parametrize("stream, live", [(io.StringIO(), None), (Terminal(), False)])  # a file or pipe; --json
def test_silent_off_a_terminal_and_under_json(stream: io.StringIO, live: bool | None) -> None:
    now = [0.0]
    progress = SearchProgress(stream, live=live, now=lambda: now[0])
    _budget_search(progress, now)
    assert stream.getvalue() == "" and not progress.live
    assert progress.counts_done == 2  # still counted


def test_a_terminal_gets_one_line_redrawn_and_erased(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    now = [0.0]
    stream = Terminal()
    progress = SearchProgress(stream, now=lambda: now[0])
    _budget_search(progress, now)
    text = stream.getvalue()
    draws = text.split(ERASE)[1:]
    assert "\n" not in text and text.endswith(ERASE) and draws[-1] == ""  # erased before the command's output
    assert draws[0] == "search: GPU count 1/2 (8 GPUs), trial 0, elapsed 0:00"
    assert any(d.startswith("search: GPU count 2/2 (16 GPUs), trial 20/20, elapsed 0:00, "
                            "best on 16 GPUs: 1.250 s/step") for d in draws)
    # 40 trials 10 ms apart: at most one redraw per 0.1 s between the forced ones (start, finished)
    assert len(draws) - 1 <= 4 + 0.4 / 0.1 + 2


def test_single_search_names_its_gpu_count() -> None:
    progress = SearchProgress(io.StringIO())
    progress.start(64)
    progress.trial(3)
    assert progress.status_line().startswith("search: 64 GPUs, trial 3, elapsed ")
