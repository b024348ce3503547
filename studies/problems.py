"""A study expanded into problems: one search per model x GPU kind x GPU count x batch x sequence length.

Each problem has a readable ``id`` (unique within its study) and a ``key`` that
also fingerprints everything its result depends on (the model's architecture,
the GPU's figures, the search settings, the content of a user profile's
tables). Results and Optuna studies are stored under the key, so editing a
study, or the tables of its profile, and running it again into the same storage
re-searches exactly the problems that changed and reuses the others.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from costmodel.specs.catalog import get_gpu
from costmodel.specs.errors import SpecError
from costmodel.specs.model import ModelSpec
from search.problem import build_problem
from search.space import SearchProblem
from studies.spec import SearchSettings, StudySpec

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True, kw_only=True)
class Problem:
    """One search of a study (plain data: picklable, hashable, no catalog look-ups needed to compare).

    Parameters
    ----------
    study : str
        The study's name.
    model : ModelSpec
    gpu : str
        Catalog GPU name.
    num_gpus, global_batch_size, seq_length : int
    gpus_per_node : int, optional
        ``None``: the GPU catalog's node size.
    search : SearchSettings
    profile_hash : str, optional
        Content hash of ``search.profile``'s tables (``None``: built-in profiles, or not checked).
    """

    study: str
    model: ModelSpec
    gpu: str
    num_gpus: int
    global_batch_size: int
    seq_length: int
    gpus_per_node: int | None
    search: SearchSettings
    profile_hash: str | None = None

    @property
    def id(self) -> str:
        """Readable and file-name safe, e.g. ``llama3.1-70b_h100-sxm5-80gb_256g_b512_s8192``."""
        raw = f"{self.model.name}_{self.gpu}_{self.num_gpus}g_b{self.global_batch_size}_s{self.seq_length}"
        return _UNSAFE.sub("-", raw)

    @cached_property
    def fingerprint(self) -> str:
        """Hash of every input of the search (model fields, GPU figures, settings, the profile's content).

        The profile enters by content, not by path: new tables in the same folder give new keys.
        """
        payload = {
            "model": {k: v for k, v in self.model.to_dict().items()
                      if k not in ("source", "published_params", "published_params_source")},
            "gpu": get_gpu(self.gpu).to_dict(),
            "num_gpus": self.num_gpus, "gpus_per_node": self.gpus_per_node,
            "global_batch_size": self.global_batch_size, "seq_length": self.seq_length,
            # The profile by content in place of its path (None, as before, for built-in profiles).
            "search": {**self.search.to_dict(), "profile": self.profile_hash},
        }
        text = json.dumps(payload, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def key(self) -> str:
        """Storage key and Optuna study name: ``<study>/<id>/<fingerprint>``."""
        return f"{self.study}/{self.id}/{self.fingerprint}"

    def search_problem(self) -> SearchProblem:
        """The search package's problem (raises ``SpecError`` if, e.g., the count is not whole nodes)."""
        s = self.search
        return build_problem(model=self.model, gpu=get_gpu(self.gpu), num_gpus=self.num_gpus,
                             global_batch_size=self.global_batch_size, seq_length=self.seq_length,
                             gpus_per_node=self.gpus_per_node, fixed=s.fixed, allowed=s.allowed, bounds=s.bounds,
                             memory_margin=s.memory_margin)

    def describe(self) -> dict[str, Any]:
        """The identifying columns of a result row."""
        return {"problem": self.id, "model": self.model.name, "gpu": self.gpu, "num_gpus": self.num_gpus,
                "global_batch_size": self.global_batch_size, "seq_length": self.seq_length,
                "tokens_per_step": self.global_batch_size * self.seq_length}


def profile_hash(settings: SearchSettings) -> str | None:
    """Content hash of the study's user profile, loaded once (``None`` without one).

    Raises
    ------
    SpecError
        If the profile folder is missing or broken: checked before any search, so the problems are
        not stored as ``invalid``.
    """
    if settings.profile is None:
        return None
    from costmodel.profiles.factors import profile_content_hash

    if not Path(settings.profile).is_dir():
        raise SpecError("search.profile", settings.profile, "an existing profile folder (from `parplan profile run`)")
    return profile_content_hash(settings.profile)  # tables, or a `replay fit` factor profile with its base


def expand(spec: StudySpec, *, check_profile: bool = True) -> tuple[Problem, ...]:
    """Every problem of ``spec``: models outermost, then GPU kinds, sequence lengths, batches, counts.

    Parameters
    ----------
    check_profile : bool
        Load ``search.profile`` and key the problems by its content. ``False`` (reports of a finished
        folder): ids and descriptions only; the keys then do not match the stored ones.

    Raises
    ------
    SpecError
        If two different problems get the same id (e.g. models named ``a b`` and ``a-b``), or the
        profile is missing.
    """
    digest = profile_hash(spec.search) if check_profile else None
    out: list[Problem] = []
    for model in spec.models:
        for gpu in spec.gpus:
            for seq in spec.seq_lengths:
                seq_length = model.seq_length if seq is None else seq
                for batch in spec.batches:
                    for count in spec.gpu_counts:
                        out.append(Problem(study=spec.name, model=model, gpu=gpu, num_gpus=count,
                                           global_batch_size=batch.sequences(seq_length), seq_length=seq_length,
                                           gpus_per_node=spec.gpus_per_node, search=spec.search,
                                           profile_hash=digest))
    seen: dict[str, Problem] = {}
    for p in out:
        first = seen.setdefault(p.id, p)  # equal problems (two token budgets that round to one batch): search once
        if first != p:
            raise SpecError("models", f"{first.model.name!r} and {p.model.name!r}",
                            f"models whose names stay distinct as problem ids (both give {p.id!r}; "
                            f"rename one)")
    return tuple(seen.values())
