"""The framework record kept inside a stored run (bot/frameworks/record.py): its released version's frozen fixture
keeps loading and resuming; a record of an unknown version is refused as such."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from bot.agent.state import RunState
from bot.errors import UnknownSchemaVersion
from bot.frameworks.pydantic_ai import PydanticAIAgent
from bot.frameworks.record import FrameworkRecord
from bot.store import RedisRunStore
from bot.testing.openai_server import FakeOpenAI, Reply

FIXTURE = Path(__file__).parent.parent / "fixtures" / "frameworks" / "pydantic_ai_record_v1.json"


async def test_a_version_1_record_loads_and_its_approval_resumes_the_pydantic_ai_run(
    fake_redis: aioredis.Redis, openai_server: FakeOpenAI, prefix: str
) -> None:
    state = RunState.from_json(FIXTURE.read_text())
    record = FrameworkRecord.of(state)
    assert record is not None and record.framework == "pydantic-ai"
    assert [r.tool_call_id for r in record.undecided()] == ["call_fixture_1"]
    store = RedisRunStore(fake_redis, prefix=prefix)
    await store.create(state.model_copy(update={"revision": 0}), owner="fixture")

    restarted: list[str] = []
    provider = OpenAIProvider(base_url=openai_server.base_url, api_key="sk-test")
    inner = PydanticAgent(OpenAIChatModel("test-model", provider=provider), instructions="Help with ops.")

    @inner.tool_plain(requires_approval=True)
    def restart_service(name: str) -> str:
        """Restart a service."""
        restarted.append(name)
        return f"{name} restarted"

    openai_server.script(Reply(text="Restarted."))
    agent = PydanticAIAgent(inner, store=store)
    await (await agent.approve_tool_call(run_id=state.run_id, approved_by="U1")).collect()
    assert restarted == ["api"]
    assert openai_server.requests[-1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_fixture_1",
        "content": "api restarted",
    }


def test_a_record_of_an_unknown_version_is_refused() -> None:
    raw = json.loads(FIXTURE.read_text())
    raw["metadata"]["framework"]["schema_version"] = 99
    with pytest.raises(UnknownSchemaVersion):
        FrameworkRecord.of(RunState.model_validate(raw))
