"""The sampled-range margin shared by the predictors' range check and the splitting of large operators."""

from __future__ import annotations

from typing import Final

# A query is in range when every shape column lies within [min / margin, max * margin] of the
# table: a quarter beyond the sampled edge is interpolation between grid points in log space
# (the GEMM grid steps by up to 3x), much further is extrapolation.
RANGE_MARGIN: Final = 1.25
