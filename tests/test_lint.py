"""ruff and mypy (strict on bot/) stay clean: part of the test suite so CI enforces them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_is_clean() -> None:
    out = run("ruff", "check", "bot", "tests", "benchmarks")
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_strict_is_clean() -> None:
    out = run("mypy")
    assert out.returncode == 0, out.stdout + out.stderr
