"""parplan imports as itself from any working directory (issue 15 item 7)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PACKAGES = ("parplan", "costmodel", "constraints", "search", "studies")


def test_import_from_a_foreign_directory_with_decoys(tmp_path: Path) -> None:
    # Decoy folders named like parplan's top-level packages: a namespace package could shadow them.
    for name in ("search", "studies", "constraints", "costmodel"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "decoy.py").write_text("raise SystemExit('decoy imported')\n")
    code = ("import parplan, search, costmodel, constraints, studies;"
            "print(*(m.__file__ for m in (parplan, search, costmodel, constraints, studies)), sep='\\n')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    files = [Path(line) for line in proc.stdout.splitlines()]
    assert len(files) == 5 and all(f.name == "__init__.py" and tmp_path not in f.parents for f in files)


def test_python_dash_m_parplan(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "parplan", "--version"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("parplan ")


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_folder_has_an_init(package: str) -> None:
    # No implicit namespace packages: each folder with Python modules is a regular package.
    for folder in [ROOT / package, *(p for p in (ROOT / package).rglob("*") if p.is_dir())]:
        if folder.name == "__pycache__" or not any(folder.glob("*.py")):
            continue
        assert (folder / "__init__.py").exists(), folder
