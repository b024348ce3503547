"""The build backend: setuptools, with editable installs in "compat" mode.

setuptools' default ("lenient") editable install maps the packages through a
meta-path finder that Python consults after its path finder. A folder in the
working directory named like one of parplan's top-level packages (``search/``,
``studies/`` ...; no ``__init__.py``) then imports as an empty namespace package
instead of parplan's. "compat" mode puts the repository root on ``sys.path``
(a ``.pth`` file), so the path finder sees the real, regular packages, which win
over namespace portions (PEP 420). Wheels are unaffected.
"""

from setuptools import build_meta as _orig
from setuptools.build_meta import *  # noqa: F401,F403  (the whole PEP 517/660 interface)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    settings = dict(config_settings or {})
    settings.setdefault("editable_mode", "compat")
    return _orig.build_editable(wheel_directory, settings, metadata_directory)
