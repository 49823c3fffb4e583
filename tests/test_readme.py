"""Every ```python snippet in README.md and docs/ runs as written; the examples print what the docs say they do.

A snippet that is only a fragment is marked on the line before its fence with ``<!-- not run: reason -->``; the
marker is counted (``test_not_run_markers_give_a_reason``), so a snippet is never skipped silently. Every ```json
snippet parses. Snippets run in a fresh temporary directory (a file they write stays there), with this checkout
on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(
    r"^(?P<marker><!-- not run: (?P<reason>[^>]*?) -->\n)?```(?P<lang>\w*)\n(?P<code>.*?)^```$", re.M | re.S
)


@dataclass(frozen=True)
class Snippet:
    path: Path
    line: int
    lang: str
    code: str
    not_run: str | None  # the marker's reason, or None for a snippet that runs

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def snippets(lang: str) -> list[Snippet]:
    found = []
    for path in DOCS:
        text = path.read_text()
        for m in FENCE.finditer(text):
            if m.group("lang") == lang:
                line = text.count("\n", 0, m.start("lang")) + 1
                found.append(Snippet(path, line, lang, m.group("code"), m.group("reason")))
    return found


PYTHON = snippets("python")
RUN = [s for s in PYTHON if s.not_run is None]


def run_snippet(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


def the_snippet(needle: str) -> str:
    """The one runnable python snippet containing ``needle``."""
    [found] = [s.code for s in RUN if needle in s.code]
    return found


def test_the_docs_have_python_snippets_and_every_one_is_collected() -> None:
    assert len(RUN) >= 3, [s.id for s in PYTHON]
    fences = sum(p.read_text().count("```python\n") for p in DOCS)
    assert fences == len(PYTHON), "a ```python fence the collector did not see (an unclosed fence?)"


@pytest.mark.parametrize("snippet", RUN, ids=lambda s: s.id)
def test_python_snippet_runs(snippet: Snippet, tmp_path: Path) -> None:
    for package in ("pydantic_ai", "agents", "langgraph"):  # a framework's page, on the core-only install
        if re.search(rf"^\s*(from|import) {package}\b", snippet.code, flags=re.MULTILINE):
            pytest.importorskip(
                package, reason=f"the snippet imports {package}: needs its extra (pip install -e '.[dev]')"
            )
    out = run_snippet(snippet.code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "Unclosed" not in out.stderr, out.stderr  # a snippet closes what it opens (aiohttp warns otherwise)


def test_not_run_markers_give_a_reason() -> None:
    for s in PYTHON:
        if s.not_run is not None:
            assert s.not_run.strip(), f"{s.id}: a not-run marker without a reason"


@pytest.mark.parametrize("snippet", snippets("json"), ids=lambda s: s.id)
def test_json_snippet_parses(snippet: Snippet) -> None:
    json.loads(snippet.code)


def test_readme_first_example_suspends_and_resumes(tmp_path: Path) -> None:
    """The README's short runtime example: a question, its answer, the tool it led to, the reply."""
    out = run_snippet(the_snippet("Check my ticket"), tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["asked: Which ticket?", "SUP-12 is open."]


def test_runtime_example_runs_three_modes(tmp_path: Path) -> None:
    out = run_snippet(the_snippet("Summarize my project"), tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "[free-form] asked: What should the summary focus on? options=[] mode=None" in lines
    assert "[single] asked: Which repo? options=['api', 'web'] mode=single_select" in lines
    assert "[multi] asked: What next? options=['Add tests', 'Update docs'] mode=multi_select" in lines
    for mode in ("free-form", "single", "multi"):
        assert f"[{mode}] reply: Done ({mode})." in lines


def test_my_agent_loads_and_its_approval_flow_runs(tmp_path: Path) -> None:
    """docs/tools.md's my_agent.py, loaded as AGENT=my_agent:build would, asks for approval before restarting."""
    (tmp_path / "my_agent.py").write_text(the_snippet("def build("))
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
    out = run_snippet(script, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "tool-call-approval" in out.stdout and "restarted api" in out.stdout


@pytest.mark.parametrize("page", ["README.md", "docs/playground.md"])
def test_every_demo_word_is_listed(page: str) -> None:
    """The one list of demo words names every keyword the offline demo model reacts to."""
    from bot.playground.demo_script import DEPLOY_TOOL, FLOWS, REFUND_TOOL, RESTART_TOOL, TICKET_TOOL

    text = (ROOT / page).read_text()
    words = [keyword for _flow, keywords, _questions in FLOWS for keyword in keywords]
    words += [RESTART_TOOL.split("_")[0], TICKET_TOOL.split("_")[1], REFUND_TOOL, f"{DEPLOY_TOOL} prod", "stop"]
    words += ["cancel"]
    missing = [w for w in words if not re.search(rf"`{re.escape(w)}[^`]*`", text)]
    assert not missing, f"{page} does not list {missing}"


def test_every_setting_is_in_the_settings_table() -> None:
    """docs/slack-setup.md's table names every setting bot/config.py reads."""
    from bot.config import Settings

    rows = [line for line in (ROOT / "docs" / "slack-setup.md").read_text().splitlines() if line.startswith("| `")]
    missing = [name.upper() for name in Settings.model_fields if not any(f"`{name.upper()}`" in r for r in rows)]
    assert not missing, f"not in docs/slack-setup.md's settings table: {missing}"
