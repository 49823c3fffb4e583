"""The suite's bytecode cache (tests/conftest.py ``compile_package``): compiled once for every process the suite
starts, and never taken for a module edited since."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import compile_package


def value_in_a_new_process(root: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    code = "import probe.mod as m; print(m.X)"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout


def test_an_edit_of_the_same_size_in_the_same_second_is_seen(tmp_path: Path) -> None:
    package = tmp_path / "probe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    module = package / "mod.py"
    module.write_text("X = 1\n")
    stamp = module.stat().st_mtime_ns
    compile_package(package)
    assert list((package / "__pycache__").glob("mod.*.pyc"))  # compiled
    module.write_text("X = 2\n")  # the same size, and (below) the same mtime: what a fast edit-and-test loop does
    os.utime(module, ns=(stamp, stamp))
    assert value_in_a_new_process(tmp_path) == "2\n"
    compile_package(package)  # the next run's compile
    assert value_in_a_new_process(tmp_path) == "2\n"
