"""Trace replay and what-if edits (Lumos, arXiv 2504.09307): see README.md."""

from costmodel.replay.edit import apply_what_if, parse_what_if
from costmodel.replay.graph import Graph, build_graph
from costmodel.replay.parse import read_trace
from costmodel.replay.simulate import Replay, simulate

__all__ = ["Graph", "Replay", "apply_what_if", "build_graph", "parse_what_if", "read_trace", "simulate"]
