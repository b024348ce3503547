"""A layer's TP chunk GEMMs are timed in one predictor call: the dry run lists every shape the real pass times."""

from __future__ import annotations

import pytest

from costmodel.llm.tp_comm import tp_layer_exposed_s
from costmodel.specs import get_gpu, get_model
from costmodel.specs.gpu import ClusterSpec
from costmodel.specs.runspec import RunSpec
from costmodel.specs.strategy import Strategy
from costmodel.timing import OperatorTimer
from search.objective import search_timer


@pytest.mark.parametrize("sp, overlap, moe", [(True, True, False), (True, False, False), (False, False, False),
                                              (True, True, True)])
def test_one_fill_per_layer(sp: bool, overlap: bool, moe: bool) -> None:
    gpu = get_gpu("h100-sxm5-80gb")
    fitted = search_timer(gpu)
    timer = OperatorTimer(gpu, fitted.predictors, fitted.reference)  # a cold memo on the same predictors
    fills = []
    fill = timer._fill
    timer._fill = lambda ops: fills.append(len(ops)) or fill(ops)  # type: ignore[method-assign]
    model = get_model("mixtral-8x7b" if moe else "llama3.1-70b")
    run = RunSpec(model=model, cluster=ClusterSpec(gpu=gpu, num_gpus=64, gpus_per_node=8),
                  strategy=Strategy(tp=8, dp=8, micro_batch_size=1, global_batch_size=64, sequence_parallel=sp,
                                    tp_comm_overlap=overlap), seq_length=4096)
    seconds = tp_layer_exposed_s(run, timer, lambda op, nbytes: 1e-4, moe=moe)
    assert seconds >= 0.0
    assert len(fills) == 1 and fills[0] >= 4  # the dry run's batch; the real pass found every shape timed
