"""The README's Python example runs as written and prints a suspension and a reply per mode."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_example_runs_three_modes() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert blocks, "no python example in README"
    out = subprocess.run([sys.executable, "-c", blocks[0]], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "[free-form] asked: What should the summary focus on? options=[] mode=None" in lines
    assert "[single] asked: Which repo? options=['api', 'web'] mode=single_select" in lines
    assert "[multi] asked: What next? options=['Add tests', 'Update docs'] mode=multi_select" in lines
    for mode in ("free-form", "single", "multi"):
        assert f"[{mode}] reply: Done ({mode})." in lines
