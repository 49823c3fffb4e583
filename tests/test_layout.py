"""The house's rules, read from the code (every import of ``bot/``, function-level and type-checking ones included;
the reader is ``benchmarks.request_walk.import_graph``, which also draws the request walks): no import cycle, the
runtime and the store know nothing of Slack or of operations, the fake Slack nothing of the bot, the approval policy
nothing but its own files, and no folder grows past about 15 modules."""

from __future__ import annotations

import graphlib
from collections import Counter

import pytest

from benchmarks.request_walk import BOT, EFFECTS, import_graph, walk_requests

GRAPH = import_graph(left_out=())

OUTSIDE_THE_RUNTIME = (
    "bot.slack",
    "bot.ops",
    "bot.mcp_server",
    "bot.playground",
    "bot.fakeslack",
    "bot.frameworks",
    "bot.config",
    "bot.serving",
    "bot.__main__",
)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """``[]``, or the modules of one import cycle, sorted (the standard library's ``graphlib`` finds it)."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return [sorted(set(exc.args[1]))]
    return []


def imports_of(prefix: str, banned: tuple[str, ...]) -> list[tuple[str, str]]:
    return sorted(
        (m, t) for m, targets in GRAPH.items() if m.startswith(prefix) for t in targets if t.startswith(banned)
    )


def test_the_reader_sees_the_whole_package() -> None:
    assert len(GRAPH) == len(list(BOT.rglob("*.py")))
    assert "bot.slack.transport.web_api" in GRAPH["bot.slack.app"]
    assert "bot.agent.state" in GRAPH["bot.store.redis_store"]


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_anywhere_under_bot() -> None:
    assert cycles(GRAPH) == []


def test_the_runtime_knows_nothing_of_slack_operations_or_the_deployment() -> None:
    """``bot.agent`` is Slack-agnostic, offers hooks instead of importing metrics and audit (``bot.ops``), and uses
    the store through its port (``bot.agent.store``), never Redis's implementation (``bot.store``, which imports the
    runtime's state to store it). Work owed since an outage is retried by one rule for all of them
    (``bot.outage``, which imports nothing of the bot)."""
    assert imports_of("bot.agent", OUTSIDE_THE_RUNTIME) == []
    assert imports_of("bot.agent", ("bot.store",)) == []
    assert GRAPH["bot.outage"] == set()
    assert imports_of("bot.store", OUTSIDE_THE_RUNTIME) == []


def test_the_fake_slack_and_the_approval_policy_stand_alone() -> None:
    """The fake Slack is Slack's side of the wire: it imports nothing of the bot it talks to, nor of the demo app
    built on it. The approval policy is data read the same way by the runtime, the Slack layer, the MCP server and
    the CLI: it imports none of them, nor the settings (the deployment's policy reaches its CLI from
    ``python -m bot``: :func:`bot.config.deployed_policy`)."""
    bot_side = ("bot.slack", "bot.agent", "bot.store", "bot.ops", "bot.mcp_server", "bot.frameworks", "bot.playground")
    assert imports_of("bot.fakeslack", bot_side) == []
    assert imports_of("bot.approval_policy", (*bot_side, "bot.config")) == []


def test_no_folder_holds_more_than_about_fifteen_modules() -> None:
    per_folder = Counter(path.parent.relative_to(BOT.parent).as_posix() for path in BOT.rglob("*.py"))
    assert max(per_folder.values()) <= 17, per_folder.most_common(3)  # __init__.py included


async def test_a_mention_and_a_click_stay_within_issue_21s_path_targets() -> None:
    """The path of a request from its HTTP handler to its effects (``benchmarks.request_walk --paths``: a mention's
    question posted; a click's resume and the update of the question's message): at most 8 modules and 4 returns to
    a module already left, and no call up into a module that imports the caller's."""
    walked = await walk_requests(False, paths=True)
    for title in ("mention", "click"):
        path = walked[title]
        assert path.sequence[0] == "bot.slack.transport.http" and path.sequence[-1] == "bot.slack.transport.web_api"
        assert path.modules <= 8 and path.returns <= 4 and path.climbs == [], (title, path)
    assert "bot.agent.agent" in walked["click"].sequence  # the resume is on the click's path


async def test_an_effect_the_walk_never_saw_is_an_error_not_an_empty_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(EFFECTS, "mention", {"chat.postMessage": lambda args: "Which repository?" in str(args)})
    with pytest.raises(SystemExit, match=r"the mention's chat\.postMessage was not seen"):
        await walk_requests(False, paths=True)
