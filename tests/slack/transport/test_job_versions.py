"""LazyJobs runs queued jobs of older shapes (upgraded step by step) and never runs one it can't read."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.transport.runner import InProcessRunner, LazyJobs


def v1_to_v2(job: dict[str, Any]) -> dict[str, Any]:
    """A made-up shape change: version 2 calls the payload's "old_text" "text"."""
    return {**job, "body": {"text": job["body"]["old_text"]}}


def v2_to_v3(job: dict[str, Any]) -> dict[str, Any]:
    return {**job, "body": {**job["body"], "lang": "en"}}


async def run(jobs: LazyJobs, job: dict[str, Any]) -> None:
    await jobs.run_job(job, client=AsyncWebClient(token="xoxb-test"), runner=InProcessRunner(logging.getLogger("t")))


@pytest.fixture
def seen() -> list[dict[str, Any]]:
    return []


@pytest.fixture
def jobs(seen: list[dict[str, Any]]) -> LazyJobs:
    registry = LazyJobs(version=3, upgrades={1: v1_to_v2, 2: v2_to_v3})

    async def on_thing(body: dict[str, Any]) -> None:
        seen.append(body)

    registry.add(on_thing)
    return registry


async def test_an_older_job_is_upgraded_step_by_step_before_it_runs(jobs: LazyJobs, seen: list[dict[str, Any]]) -> None:
    await run(jobs, {"v": 1, "id": "j1", "fn": "on_thing", "body": {"old_text": "hi"}})
    await run(jobs, {"v": 2, "id": "j2", "fn": "on_thing", "body": {"text": "yo"}})
    await run(jobs, {"v": 3, "id": "j3", "fn": "on_thing", "body": {"text": "hey", "lang": "de"}})
    assert seen == [{"text": "hi", "lang": "en"}, {"text": "yo", "lang": "en"}, {"text": "hey", "lang": "de"}]
    assert jobs.upgrade({"fn": "on_thing", "body": {"old_text": "x"}}) == {  # "v" absent: the first shape
        "fn": "on_thing",
        "body": {"text": "x", "lang": "en"},
        "v": 3,
    }


async def test_a_job_of_a_newer_version_or_without_an_upgrade_path_is_not_run(
    seen: list[dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    jobs = LazyJobs(version=3, upgrades={2: v2_to_v3})  # no way from version 1

    async def on_thing(body: dict[str, Any]) -> None:
        seen.append(body)

    jobs.add(on_thing)
    await run(jobs, {"v": 4, "id": "j4", "fn": "on_thing", "body": {"text": "from the future"}})
    await run(jobs, {"v": 1, "id": "j1", "fn": "on_thing", "body": {"old_text": "lost"}})
    assert seen == []
    assert len([r for r in caplog.records if "dropping job" in r.getMessage()]) == 2
