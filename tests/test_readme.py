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


def test_readme_my_agent_loads_and_its_approval_flow_runs(tmp_path: Path) -> None:
    """The README's my_agent.py, loaded as AGENT=my_agent:build would, asks for approval before restarting."""
    readme = (ROOT / "README.md").read_text()
    my_agent = next(b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S) if "def build(" in b)
    (tmp_path / "my_agent.py").write_text(my_agent)
    script = """
import asyncio, fakeredis
from bot.agent.loading import load_agent
from bot.agent import OpenAIChatModel
from bot.store import RedisRunStore
from bot.testing.openai_server import FakeOpenAI, Reply, tool_call

async def main():
    async with FakeOpenAI() as server:
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="sk-x")
        agent = load_agent("my_agent:build", model=model, store=RedisRunStore(fakeredis.FakeAsyncRedis()))
        server.script(Reply(tool_calls=[tool_call("restart_service", {"name": "api"})]), Reply(text="ok"))
        stream = await agent.stream("restart api")
        kinds = [c.type for c in await stream.collect()]
        resumed = await agent.approve_tool_call(run_id=stream.run_id, approved_by="U1")
        await resumed.collect()
        print(kinds, server.requests[-1]["messages"][-1]["content"])
        await model.aclose()

asyncio.run(main())
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "tool-call-approval" in out.stdout and "restarted api" in out.stdout
