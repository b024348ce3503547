"""Which layers each pipeline rank holds: the one pipeline-layout object rules, memory, time and exports read.

Megatron-Core (github.com/NVIDIA/Megatron-LM @d98e8a6) places layers on pipeline ranks in one of four
ways. ``PipelineLayout`` spells each as Megatron's own explicit layout: ``pp * vpp`` virtual stages
("chunks"), chunk ``i`` running virtual stage ``i // pp`` on rank ``i % pp``, each a sequence of ``E``
(embedding), ``t`` (transformer decoder layer), ``m`` (MTP layer) and ``L`` (LM head and loss).

- ``--pipeline-model-parallel-layout`` (``Strategy.pipeline_layout``): a string such as
  ``"Et*3|(tt|)*29,m|L"``, parsed as ``PipelineParallelLayerLayout.parse_str_to_list`` parses it and
  checked as its ``validate_layer_layout`` checks (megatron/core/transformer/pipeline_parallel_layer_layout.py).
- ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``
  (``first_stage_layers`` / ``last_stage_layers``): those ranks hold that many layers and the other ranks
  share the rest evenly (megatron/core/transformer/transformer_block.py ``get_num_layers_to_build``, checks of
  transformer_config.py ``__post_init__``).
- ``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split``: the embedding
  and the loss count as one layer each in an even split; the first (last) chunk builds one layer fewer.
- none of them: the even split, or, when ``pp`` does not divide the layers and ``vpp == 1``, parplan's default
  first/last-stage split (:func:`default_ends`), which the exports spell as the two flags above.

MTP layers sit in the last chunk, before the loss, unless a layout string places them. A strategy that
Megatron-Core would refuse still gets a layout (layers spread as evenly as possible) so that its memory
can be reported; ``problems`` holds the sentences the rules report for it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING

from costmodel.specs.errors import SpecError

if TYPE_CHECKING:
    from costmodel.specs.model import ModelSpec
    from costmodel.specs.strategy import Strategy

EMBEDDING, DECODER, MTP, LOSS = "E", "t", "m", "L"
SYMBOLS = (EMBEDDING, DECODER, MTP, LOSS)
MAX_LAYOUT_CHARS = 4096
"""Longest layout string read (NVIDIA's published layouts are under 40 characters)."""
MAX_LAYOUT_SYMBOLS = 1 << 16
"""Most layers and separators a layout string may unroll to (a ``t*99999999`` must not fill memory)."""

# Megatron-Core parse_str_to_list: commas are cosmetic, then "(...)*n" and "x*n" are unrolled, in this order.
_GROUP = re.compile(r"\(([^)]+)\)\*(\d+)")
_REPEAT = re.compile(r"(.)\*(\d+)")
_ALLOWED = ("a Megatron-Core pipeline layout: E, t, m, L per stage, stages split by '|', repetition as "
            "'x*n' or '(...)*n', commas optional")


def parse_layout(text: object, name: str = "strategy.pipeline_layout") -> tuple[str, ...]:
    """The chunks of a ``--pipeline-model-parallel-layout`` string, in Megatron-Core's order.

    Accepts exactly what ``PipelineParallelLayerLayout.parse_str_to_list`` accepts (empty stages
    included), within ``MAX_LAYOUT_CHARS`` characters unrolling to at most ``MAX_LAYOUT_SYMBOLS``.

    Raises
    ------
    SpecError
        Naming ``name`` and the string, if it is not such a layout.
    """
    if not isinstance(text, str) or len(text) > MAX_LAYOUT_CHARS:
        raise SpecError(name, text, f"{_ALLOWED}, at most {MAX_LAYOUT_CHARS} characters")
    unrolled = text.replace(",", "")
    for pattern in (_GROUP, _REPEAT):
        unrolled = _unroll(pattern, unrolled, text, name)
    chunks = tuple(unrolled.split("|"))
    for chunk in chunks:
        for char in chunk:
            if char not in SYMBOLS:
                raise SpecError(name, text, f"{_ALLOWED} ({char!r} is not a layer character)")
    return chunks


def _unroll(pattern: re.Pattern[str], text: str, original: str, name: str) -> str:
    """One ``re.sub`` pass of Megatron's unrolling, refusing to grow past ``MAX_LAYOUT_SYMBOLS``."""
    grown = [len(text)]

    def repeat(match: re.Match[str]) -> str:
        body, count = match.group(1), match.group(2)
        size = len(body) * int(count) if len(count) <= 6 else MAX_LAYOUT_SYMBOLS + 1
        grown[0] += size - len(match.group(0))
        if grown[0] > MAX_LAYOUT_SYMBOLS:
            raise SpecError(name, original, f"{_ALLOWED}, unrolling to at most {MAX_LAYOUT_SYMBOLS} symbols")
        return body * int(count)

    return pattern.sub(repeat, text)


def format_layout(chunks: tuple[str, ...]) -> str:
    """A compact layout string that :func:`parse_layout` (and Megatron-Core) reads back as ``chunks``.

    Runs of equal chunks become ``(chunk|)*n`` and runs of one layer ``t*n``, as in NVIDIA's
    ``"Et*3|(tt|)*29,m|L"``.
    """
    runs: list[tuple[str, int]] = []
    for chunk in chunks:
        if runs and runs[-1][0] == chunk:
            runs[-1] = (chunk, runs[-1][1] + 1)
        else:
            runs.append((chunk, 1))
    parts = []
    for index, (chunk, count) in enumerate(runs):
        text = _format_chunk(chunk)
        last = index == len(runs) - 1
        repeated = count - 1 if last else count  # a trailing "|" would open one more (empty) stage
        if repeated >= 2:
            parts.append(f"({text}|)*{repeated},")
        elif repeated == 1:
            parts.append(f"{text}|")
        if last:
            parts.append(text)
    return "".join(parts)


def _format_chunk(chunk: str) -> str:
    out, i = [], 0
    while i < len(chunk):
        j = i
        while j < len(chunk) and chunk[j] == chunk[i]:
            j += 1
        out.append(chunk[i] * (j - i) if j - i <= 2 else f"{chunk[i]}*{j - i}")
        i = j
    return "".join(out)


@dataclass(frozen=True)
class PipelineLayout:
    """The layers of every virtual stage of every pipeline rank (frozen, hashable).

    ``chunks`` are in Megatron-Core's order (chunk ``i`` is virtual stage ``i // pp`` of rank
    ``i % pp``). The knob fields say how the layout is launched: ``layout_string`` when it came
    from one, else the first/last-stage counts (parplan's default ends included) or the
    embedding/loss accounting; all unset for an even split.
    """

    pp: int
    chunks: tuple[str, ...]
    problems: tuple[str, ...] = ()
    layout_string: str | None = None
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    account_for_embedding: bool = False
    account_for_loss: bool = False
    _counts: dict[tuple[int, str], int] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def vpp(self) -> int:
        return len(self.chunks) // self.pp

    def rank_chunks(self, rank: int) -> tuple[str, ...]:
        """The chunks of pipeline rank ``rank``, virtual stage 0 first."""
        return self.chunks[rank::self.pp]

    def count(self, rank: int, symbol: str) -> int:
        """How many ``symbol`` (``E``, ``t``, ``m``, ``L``) rank ``rank`` holds over its chunks."""
        key = (rank, symbol)
        if key not in self._counts:
            self._counts[key] = sum(chunk.count(symbol) for chunk in self.rank_chunks(rank))
        return self._counts[key]

    def layers(self, rank: int) -> int:
        """Transformer decoder layers on rank ``rank``."""
        return self.count(rank, DECODER)

    @cached_property
    def stage_layers(self) -> tuple[int, ...]:
        """Decoder layers of each rank (the contract's ``pipeline_layers``)."""
        return tuple(self.layers(rank) for rank in range(self.pp))

    def rank_key(self, rank: int) -> tuple[int, int, int, int]:
        """(decoder, embedding, MTP, loss) counts of ``rank``: ranks with equal keys do equal work."""
        return (self.layers(rank), self.count(rank, EMBEDDING), self.count(rank, MTP), self.count(rank, LOSS))

    @cached_property
    def first_alike(self) -> tuple[int, ...]:
        """For each rank, the first rank with its ``rank_key`` (ranks that do equal work share its compute)."""
        first: dict[tuple[int, int, int, int], int] = {}
        return tuple(first.setdefault(self.rank_key(rank), rank) for rank in range(self.pp))

    def chunk_layer_ids(self, index: int) -> range:
        """Global ids of the decoder layers of chunk ``index`` (Megatron-Core ``get_layer_offset``)."""
        start = sum(chunk.count(DECODER) for chunk in self.chunks[:index])
        return range(start, start + self.chunks[index].count(DECODER))

    def to_string(self) -> str:
        """The layout as a ``--pipeline-model-parallel-layout`` string."""
        return format_layout(self.chunks)


# -- building a layout from a strategy's knobs -----------------------------------------------------
def layout_of(model: ModelSpec, strategy: Strategy) -> PipelineLayout:
    """The pipeline layout ``strategy`` gives ``model``."""
    s = strategy
    return _layout(model.num_layers, model.mtp_num_layers, s.pp, s.vpp, s.pipeline_layout, s.first_stage_layers,
                   s.last_stage_layers, s.account_for_embedding, s.account_for_loss)


def stage_layer_counts(model: ModelSpec, strategy: Strategy, stage: int) -> tuple[float, float]:
    """(dense, MoE) decoder layers on pipeline rank ``stage``.

    The rank's layers from :func:`layout_of`; a model's leading dense layers are spread evenly over
    the ranks (their share of every rank), not placed on the first ranks.
    """
    per_stage = layout_of(model, strategy).layers(stage)
    moe_share = model.num_moe_layers / model.num_layers
    return per_stage * (1 - moe_share), per_stage * moe_share


@lru_cache(maxsize=4096)  # rules, memory, decomposition, step time and exports ask for the same few layouts
def _layout(num_layers: int, mtp_layers: int, pp: int, vpp: int, text: str | None, first: int | None,
            last: int | None, account_embedding: bool, account_loss: bool) -> PipelineLayout:
    if text is not None:
        chunks = parse_layout(text)
        return PipelineLayout(pp=pp, chunks=chunks, problems=_layout_string_problems(chunks, pp, num_layers,
                                                                                      mtp_layers),
                              layout_string=text)
    if first is not None or last is not None:
        counts, problems = _first_last_counts(num_layers, pp, vpp, first, last)
        return _built(counts, vpp, mtp_layers, problems, first_stage_layers=first, last_stage_layers=last)
    if account_embedding or account_loss:
        return _accounted(num_layers, pp, vpp, mtp_layers, account_embedding, account_loss)
    if num_layers % (pp * vpp) == 0:
        return _built([num_layers // pp] * pp, vpp, mtp_layers, [])
    ends = default_ends(num_layers, pp, vpp)
    if ends is not None:
        counts, _ = _first_last_counts(num_layers, pp, vpp, *ends)
        return _built(counts, vpp, mtp_layers, [], first_stage_layers=ends[0], last_stage_layers=ends[1])
    if pp > num_layers:
        problem = f"pp={pp} exceeds num_layers={num_layers}"
    elif vpp > 1:
        problem = (f"num_layers={num_layers} must split evenly over pp*vpp = {pp}*{vpp} = {pp * vpp} model chunks "
                   f"(or set first_stage_layers/last_stage_layers, account_for_embedding/account_for_loss "
                   f"or pipeline_layout)")
    else:
        problem = (f"num_layers={num_layers} cannot be split over pp={pp}: evenly, or with fewer layers on the "
                   f"first and last stage and at least one on each")
    return _built(_balanced(num_layers, pp), vpp, mtp_layers, [problem])


def default_ends(num_layers: int, pp: int, vpp: int = 1) -> tuple[int, int] | None:
    """(first, last) stage layers of parplan's default uneven split, or None where there is none.

    Used when ``pp`` does not divide ``num_layers``, ``vpp == 1`` and no layout knob is set: every
    middle rank holds ``ceil(num_layers / pp)`` layers and the first and last ranks, which also
    hold the embedding and the LM head, give up the shortfall between them (the last one more when
    it is odd), each keeping at least one layer. Llama 3 405B's 126 layers on pp 16 give 7, 14 x 8,
    7 (the layout of Dubey et al. 2024, section 3.3.2: one layer fewer on the first and the last stage).
    """
    if vpp > 1 or pp < 2 or num_layers < pp or num_layers % pp == 0:
        return None
    base = -(-num_layers // pp)
    shortfall = base * pp - num_layers
    first, last = base - shortfall // 2, base - (shortfall + 1) // 2
    return (first, last) if first >= 1 and last >= 1 else None


SPLITS = ("even", "ends", "accounted")
"""How a search may split the layers over the pipeline ranks: ``even`` (no layout knob: the even split, or
:func:`default_ends` at vpp 1), ``ends`` (first/last-stage counts that also allow interleaving) and
``accounted`` (the embedding and the loss counted as one layer each). The last two only where the layers
do not split evenly over ``pp * vpp`` chunks, since elsewhere ``even`` already does."""


def pipeline_splits(num_layers: int, mtp_layers: int, pp: int, vpp: int) -> dict[str, dict[str, int | bool]]:
    """The ``SPLITS`` Megatron-Core builds for these degrees, each as the ``Strategy`` fields that select it."""
    out: dict[str, dict[str, int | bool]] = {}
    if not _layout(num_layers, mtp_layers, pp, vpp, None, None, None, False, False).problems:
        out["even"] = {}
    if pp < 2 or num_layers % (pp * vpp) == 0:
        return out
    ends = interleaved_ends(num_layers, pp, vpp)
    if ends is not None and (vpp > 1 or "even" not in out):
        out["ends"] = {"first_stage_layers": ends[0], "last_stage_layers": ends[1]}
    accounted = _layout(num_layers, mtp_layers, pp, vpp, None, None, None, True, True)
    offered = [_layout(num_layers, mtp_layers, pp, vpp, None, kw.get("first_stage_layers"),  # type: ignore[arg-type]
                       kw.get("last_stage_layers"), False, False).chunks for kw in out.values()]  # type: ignore[arg-type]
    # Megatron-Core builds a rank that holds only the embedding or the loss, but such a rank adds a stage of
    # bubble and transfers for no layer: a search does not offer it (a run spec may still set it).
    if not accounted.problems and accounted.chunks not in offered and min(accounted.stage_layers) > 0:
        out["accounted"] = {"account_for_embedding": True, "account_for_loss": True}
    return out


def interleaved_ends(num_layers: int, pp: int, vpp: int) -> tuple[int, int] | None:
    """(first, last) stage layers, multiples of ``vpp``, that leave the middle ranks an even share divisible
    by ``vpp`` (transformer_config.py's uneven-PP checks), with the smallest middle share at least as large
    as either end (the ends also hold the embedding and the LM head); None where there is none."""
    middle_ranks = pp - 2
    if middle_ranks == 0:  # no middle: the two ends hold everything
        last = (num_layers // 2) // vpp * vpp
        first = num_layers - last
        return (first, last) if last >= vpp and first % vpp == 0 else None
    for middle in range(vpp, num_layers + 1, vpp):
        rest = num_layers - middle * middle_ranks
        if rest < 2 * vpp:
            return None
        last = (rest // 2) // vpp * vpp
        first = rest - last
        if first % vpp == 0 and first <= middle and last >= vpp:
            return first, last
    return None


def _balanced(total: int, parts: int) -> list[int]:
    """``total`` split over ``parts`` as evenly as integers allow (the earlier parts take the remainder)."""
    q, r = divmod(max(total, 0), parts)
    return [q + (1 if i < r else 0) for i in range(parts)]


def _built(rank_counts: list[int], vpp: int, mtp_layers: int, problems: list[str],
           **knobs: int | bool | None) -> PipelineLayout:
    """Chunks of ranks holding ``rank_counts`` layers, each rank's split evenly over its ``vpp`` chunks."""
    pp = len(rank_counts)
    per_chunk = [_balanced(n, vpp) for n in rank_counts]
    chunks = [DECODER * per_chunk[i % pp][i // pp] for i in range(pp * vpp)]
    chunks[0] = EMBEDDING + chunks[0]
    chunks[-1] += MTP * mtp_layers + LOSS
    return PipelineLayout(pp=pp, chunks=tuple(chunks), problems=tuple(problems), **knobs)  # type: ignore[arg-type]


def _first_last_counts(num_layers: int, pp: int, vpp: int, first: int | None,
                       last: int | None) -> tuple[list[int], list[str]]:
    """Layers per rank with first/last-stage counts, and what Megatron-Core refuses about them.

    transformer_config.py ``__post_init__`` (uneven PP): the middle ranks must share the rest evenly,
    in multiples of vpp, and there are middle layers exactly when there are middle ranks.
    """
    rest, middle_ranks = num_layers, pp
    for count in (first, last):
        if count is not None:
            rest -= count
            middle_ranks -= 1
    problems = []
    if rest < 0 or bool(rest) != bool(middle_ranks):
        problems.append(f"first_stage_layers={first} and last_stage_layers={last} leave {rest} of num_layers="
                        f"{num_layers} for {middle_ranks} middle stages of pp={pp}")
    elif middle_ranks and rest % middle_ranks:
        problems.append(f"the {rest} layers first_stage_layers={first} and last_stage_layers={last} leave must "
                        f"split evenly over the {middle_ranks} middle stages of pp={pp}")
    elif middle_ranks and (rest // middle_ranks) % vpp:
        problems.append(f"the {rest // middle_ranks} layers of each middle stage must be divisible by vpp={vpp}")
    middle = _balanced(rest, middle_ranks) if middle_ranks > 0 else []
    counts = ([first] if first is not None else []) + middle + ([last] if last is not None else [])
    while len(counts) < pp:  # a refused split that leaves ranks without a count
        counts.append(0)
    return counts[:pp], problems


def _accounted(num_layers: int, pp: int, vpp: int, mtp_layers: int, embedding: bool, loss: bool) -> PipelineLayout:
    """The embedding and/or loss counted as one layer each in an even split (transformer_block.py)."""
    units = num_layers + embedding + loss
    problems = []
    if units % pp:
        problems.append(f"num_layers={num_layers} plus the accounted embedding/loss ({units}) must be divisible "
                        f"by pp={pp}")
    elif (units // pp) % vpp:
        problems.append(f"the {units // pp} layers per stage (embedding/loss accounted) must be divisible by "
                        f"vpp={vpp}")
    per_chunk = [_balanced(n, vpp) for n in _balanced(units, pp)]
    counts = [per_chunk[i % pp][i // pp] for i in range(pp * vpp)]
    if embedding:
        counts[0] -= 1
    if loss:
        counts[-1] -= 1
    if min(counts) < 0:  # Megatron-Core: "Not enough layers in the first virtual pipeline stage"
        problems.append(f"with the embedding/loss accounted, a pipeline chunk of pp={pp} x vpp={vpp} would hold "
                        f"fewer than zero layers")
    chunks = [DECODER * max(n, 0) for n in counts]
    chunks[0] = EMBEDDING + chunks[0]
    chunks[-1] += MTP * mtp_layers + LOSS
    return PipelineLayout(pp=pp, chunks=tuple(chunks), problems=tuple(problems), account_for_embedding=embedding,
                          account_for_loss=loss)


def _layout_string_problems(chunks: tuple[str, ...], pp: int, num_layers: int, mtp_layers: int) -> tuple[str, ...]:
    """What ``PipelineParallelLayerLayout.validate_layer_layout`` refuses about ``chunks`` for this model."""
    flat = "".join(chunks)
    vpp = len(chunks) // pp
    checks: list[tuple[Callable[[], bool], str]] = [
        (lambda: flat[:1] == EMBEDDING, "must start with the embedding (E)"),
        (lambda: flat[-1:] == LOSS, "must end with the loss (L)"),
        (lambda: flat.count(EMBEDDING) == 1, "must hold the embedding (E) exactly once"),
        (lambda: flat.count(LOSS) == 1, "must hold the loss (L) exactly once"),
        (lambda: flat.count(DECODER) == num_layers,
         f"must hold num_layers={num_layers} transformer layers (t), not {flat.count(DECODER)}"),
        (lambda: flat.count(MTP) == mtp_layers,
         f"must hold mtp_num_layers={mtp_layers} MTP layers (m), not {flat.count(MTP)}"),
        (lambda: MTP not in flat or DECODER not in flat[flat.index(MTP):],
         "must place every transformer layer (t) before the MTP layers (m)"),
        (lambda: all(MTP not in chunks[v * pp + r] for r in range(pp) for v in range(vpp - 1)),
         "must keep MTP layers (m) in the last virtual stage of a rank"),
        (lambda: all(chunks[(vpp - 1) * pp + r].count(MTP) in (0, mtp_layers) for r in range(pp)),
         "must keep all MTP layers (m) in one virtual stage"),
    ]
    return tuple(f"pipeline_layout {format_layout(chunks)!r} {message} (Megatron-Core validate_layer_layout)"
                 for check, message in checks if not check())
