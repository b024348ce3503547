"""A search collects garbage less often, and leaves the collector's thresholds as it found them."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from search import run_search
from search.gc_pace import YOUNG_THRESHOLD, fewer_collections
from tests.search.conftest import analytic_evaluator, small_problem


@pytest.fixture(autouse=True)
def thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_thresholds_raised_inside_and_restored_after_even_on_error() -> None:
    gc.set_threshold(700, 10, 10)
    with pytest.raises(RuntimeError), fewer_collections():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
        raise RuntimeError
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.parametrize("set_before", [(0, 10, 10), (10 * YOUNG_THRESHOLD, 5, 5)])
def test_collection_off_or_rarer_already_is_kept(set_before: tuple[int, int, int]) -> None:
    gc.set_threshold(*set_before)
    with fewer_collections():
        assert gc.get_threshold() == set_before
    assert gc.get_threshold() == set_before


def test_search_runs_with_fewer_collections(monkeypatch: pytest.MonkeyPatch) -> None:
    gc.set_threshold(700, 10, 10)
    seen = []
    problem = small_problem(16)
    evaluator = analytic_evaluator(problem)
    evaluate = evaluator.evaluate
    monkeypatch.setattr(evaluator, "evaluate", lambda s: seen.append(gc.get_threshold()[0]) or evaluate(s))
    run_search(problem, n_trials=12, evaluator=evaluator)
    assert seen and set(seen) == {YOUNG_THRESHOLD}
    assert gc.get_threshold() == (700, 10, 10)


def test_overlapping_blocks_in_threads_restore_the_thresholds_once_all_have_left() -> None:
    import threading

    gc.set_threshold(700, 10, 10)
    opened, main_left = threading.Event(), threading.Event()
    inside: list[tuple[int, int, int]] = []

    def search() -> None:  # opens after the main thread's block and closes after it
        with fewer_collections():
            opened.set()
            main_left.wait()
            inside.append(gc.get_threshold())

    thread = threading.Thread(target=search)
    with fewer_collections():
        thread.start()
        opened.wait()
    main_left.set()
    thread.join()
    assert inside == [(YOUNG_THRESHOLD, 10, 10)]  # still raised: the thread's block was open
    assert gc.get_threshold() == (700, 10, 10)  # restored once both left
