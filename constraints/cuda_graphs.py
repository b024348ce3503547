"""Memory that CUDA-graph capture adds beyond the eager run's peak (``Strategy.cuda_graphs``).

The mechanism, as Megatron-LM @d98e8a64 captures training graphs:

``layers`` (``--cuda-graph-impl transformer_engine``, Transformer Engine's ``make_graphed_callables`` driven by
``TECudaGraphHelper`` in megatron/core/transformer/cuda_graphs.py; ``local``'s ``CudaGraphManager`` works alike):
one forward and one backward graph per transformer layer and micro-batch (one micro-batch only when
pp = 1, ``TECudaGraphHelper.create_cudagraphs``: "If PP is not enabled, we only need to capture one
microbatch"; ``CudaGraphManager.reuse_cudagraphs = pp.size() == 1``), captured in the schedule's order
(``_order``) into one shared pool (``CudaGraphManager.global_mempool``). Because capture follows execution,
the pool's allocator lays out the saved activations as the eager run would: they are not counted twice.
Two things are extra:

- **static inputs**: a replay copies its argument into the graph's static input buffer. Inside a model
  chunk a layer's static input is the previous layer's static output (TE >= 2.7
  ``_reuse_graph_input_output_buffers=True``, set by ``TECudaGraphHelper``), and a buffer is reused once
  its micro-batch's backward is done (``TECudaGraphHelper._get_sample_arguments``), so one hidden-state
  buffer ``[s/cp (/tp with SP), b, h]`` per chunk per micro-batch in flight is a second copy of what the
  schedule already keeps (the embedding output, or the received activation that schedules.py keeps in
  ``input_tensors`` for its gradient);
- **the private pool**: memory the graphs free stays reserved in their pool, open to later graphs only,
  never to eager code (the embedding, the loss and logits, the ZeRO and MoE buffers, the userbuffers), and
  the eager allocator's free memory is closed to the graphs. The eager peak lets a layer's backward working
  set and those peak-time buffers share memory; with graphs the smaller of the two is added. A layer's
  working set is sized as one layer's activations without recompute (what parplan counts for a layer
  rebuilt under full recompute); the backward graph's static grad-output and grad-input buffers are weak
  references after capture (``_CudaGraphRunner.create_bwd_graph``: ``make_weakref``) and lie inside it.

``full_iteration`` (``--cuda-graph-impl full_iteration``, megatron/core/full_cuda_graph.py
``FullCudaGraphWrapper``): the forward-backward of the whole step is one graph in one pool, the loss and logits
inside it, so no eager buffer is separated from it (the optimizer step, with ``cuda_graph_use_single_mempool``
True by default, shares the pool). Extra: ``StaticBufferLoader`` keeps a static copy of every micro-batch's
data-loader output (``data_read`` loops ``range(num_microbatches)``) on the ranks that read data (the first
and last pipeline stage): tokens, labels, position_ids in int64 and loss_mask in fp32 (pretrain_gpt.py
``get_batch``; no attention mask, recipes build none in the data loader), 28 bytes per token.

A per-graph static buffer for every micro-batch is *not* counted: the buffer reuse above is what Megatron
added to avoid it. Without Transformer Engine's weak references Megatron warns that graph memory "may
significantly increase"; parplan models the Transformer Engine path only.
"""

from __future__ import annotations

from costmodel.specs.runspec import RunSpec

BYTES_HIDDEN = 2  # the 16-bit hidden states a layer takes and returns
# pretrain_gpt.py @d98e8a64 get_batch: tokens, labels, position_ids (int64) and loss_mask (fp32) per token
BYTES_BATCH_PER_TOKEN = 8 + 8 + 8 + 4


def static_input_bytes(run: RunSpec, chunks_in_flight: float) -> float:
    """Static input copies of per-layer graphs: one hidden state per model chunk and micro-batch in flight.

    ``chunks_in_flight`` counts (chunk, micro-batch) pairs whose backward has not run on the GPU (the
    interleaved schedule's warm-up depth, ``constraints.memory.inflight_chunks`` times ``vpp``).
    """
    if run.strategy.cuda_graphs != "layers":
        return 0.0
    s = run.strategy
    replicated = s.tp if s.sequence_parallel and s.tp > 1 else 1
    hidden = BYTES_HIDDEN * run.seq_length / s.cp * s.micro_batch_size * run.model.hidden_size / replicated
    return chunks_in_flight * hidden


def private_pool_bytes(run: RunSpec, layer_working_set_bytes: float, eager_buffer_bytes: float) -> float:
    """What the per-layer graphs' private pool adds: the smaller of a layer's working set and the eager buffers."""
    if run.strategy.cuda_graphs != "layers":
        return 0.0
    return min(layer_working_set_bytes, eager_buffer_bytes)


def static_batch_bytes(run: RunSpec, stage: int) -> float:
    """Full-iteration graphs' static copies of every micro-batch's data on the first and last stage."""
    s = run.strategy
    if s.cuda_graphs != "full_iteration" or stage not in (0, s.pp - 1):
        return 0.0
    return s.num_microbatches * s.micro_batch_size * run.seq_length * BYTES_BATCH_PER_TOKEN
