"""The large-language-model family: a transformer step decomposed, timed and composed.

Family-specific modules live here; what every family shares (specs, comm, predictors,
profiles, timing) stays one level up in ``costmodel``.
"""
