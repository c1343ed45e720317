"""The type stubs agree with the extension module (mypy's stubtest), and the package
type-checks under mypy --strict. Skipped where mypy is not installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "blockwire"


def mypy(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("mypy", reason="mypy is not installed (pip install mypy)")
    return subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, cwd=cwd
    )


def test_stubs_match_the_extension_module(tmp_path):
    # From a folder of its own: the package imported is the one installed (with its
    # extension), not the source folder beside the tests.
    r = mypy(tmp_path, "mypy.stubtest", "blockwire._native")
    assert r.returncode == 0, r.stdout + r.stderr


def test_package_type_checks_strictly():
    r = mypy(PACKAGE.parent, "mypy", "--strict", "blockwire")
    assert r.returncode == 0, r.stdout + r.stderr
