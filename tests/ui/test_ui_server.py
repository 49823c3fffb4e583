"""The playground UI server without a browser: its JSON endpoints, event stream and launcher, through the real bot.

Each test starts ``Playground`` (fake Slack + the real bot on the offline DemoModel and in-process Redis +
the UI server) on free loopback ports and talks to the UI server as the page does.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from pydantic import SecretStr
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent import OpenAIChatModel
from bot.config import Settings
from bot.fakeslack.fake_slack import ApiCall
from bot.fakeslack.sender import Ack
from bot.playground.launcher import Playground, make_model, model_label, redis_label, run_playground
from bot.playground.ui import STATIC_DIR
from bot.playground.ui_events import ack_entry, api_call_entry, decode_params, error_messages
from bot.slack.questions.follow_up_plan import COALESCE_SECONDS

BOT = "<@U_BOT>"


def is_answer_form(view: dict[str, Any]) -> bool:
    """The answer modal's form (it opens as a loading modal first)."""
    return view.get("callback_id") == "ask_answer_modal"


def settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "slack_bot_token": None,
        "openai_api_key": None,
        "redis_url": None,
        "port": 0,
        "mcp_port": 0,
    }
    return Settings(**{**values, **overrides})


@pytest.fixture
async def pg() -> AsyncIterator[Playground]:
    async with Playground(settings(), ui_port=0) as playground:
        yield playground


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session:
        yield session


async def post(http: aiohttp.ClientSession, pg: Playground, name: str, body: Any) -> tuple[int, dict[str, Any]]:
    async with http.post(f"{pg.url}api/{name}", json=body) as response:
        return response.status, await response.json()


async def bot_message(pg: Playground, thread_ts: str, needle: str) -> dict[str, Any]:
    assert pg.workspace is not None
    return await pg.workspace.wait_for_message(
        channel="C_GENERAL",
        thread_ts=thread_ts,
        predicate=lambda m: needle in json.dumps(m) and not m.get("streaming"),  # its whole text: the stream ended
        timeout=10,
    )


async def test_state_snapshot_describes_the_workspace(pg: Playground, http: aiohttp.ClientSession) -> None:
    async with http.get(f"{pg.url}api/state") as response:
        assert response.status == 200
        state = await response.json()
    assert state["info"] == {
        "model": "demo",
        "model_label": "demo model (offline)",
        "redis": "memory",
        "redis_label": "in-process Redis",
        "answerers": "requester",
    }
    assert state["bot"] == {"id": "U_BOT", "name": "askbot"}
    assert [u["id"] for u in state["users"]] == ["U_ALICE", "U_BOB", "U_CAROL"]
    channels = {c["id"]: c for c in state["channels"]}
    assert channels["C_GENERAL"]["name"] == "general" and not channels["C_GENERAL"]["is_im"]
    assert channels["D_ALICE"] == {"id": "D_ALICE", "name": "alice", "is_im": True, "user": "U_ALICE"}
    assert state["messages"]["C_GENERAL"] == [] and state["ephemerals"] == [] and state["views"] == {}


async def test_page_and_assets_are_served_from_the_package(pg: Playground, http: aiohttp.ClientSession) -> None:
    async with http.get(pg.url) as response:
        assert response.status == 200
        html = await response.text()
        csp = response.headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp
    assets = re.findall(r'(?:src|href)="(/static/[^"]+)"', html)
    assert "/static/app.js" in assets and "/static/app.css" in assets
    for asset in assets:
        async with http.get(pg.url.rstrip("/") + asset) as response:
            assert response.status == 200, asset
            body = await response.text()
        assert "http://" not in body.replace("http://www.w3.org/2000/svg", "") and "https://" not in body, asset
    for module in sorted(p.name for p in STATIC_DIR.glob("*.js")):
        async with http.get(f"{pg.url}static/{module}") as response:
            assert response.status == 200 and "javascript" in response.content_type, module
            source = await response.text()
        assert not re.search(r"\.(inner|outer)HTML\s*=|insertAdjacentHTML|document\.write|\beval\(", source), module


async def test_single_select_flow_through_the_endpoints(pg: Playground, http: aiohttp.ClientSession) -> None:
    status, said = await post(http, pg, "say", {"user": "U_ALICE", "channel": "C_GENERAL", "text": f"{BOT} deploy"})
    assert status == 200 and said["ok"]
    assert [a["name"] for a in said["acks"]] == ["app_mention", "message"]
    assert all(a["kind"] == "event" and a["status"] == 200 for a in said["acks"])
    ts = said["message"]["ts"]
    question = await bot_message(pg, ts, "Which environment")

    status, clicked = await post(
        http, pg, "click", {"user": "U_ALICE", "channel": "C_GENERAL", "ts": question["ts"], "label": "production"}
    )
    assert status == 200 and clicked["ok"]
    assert clicked["ack"]["kind"] == "interaction" and clicked["ack"]["name"] == "block_actions"
    assert clicked["ack"]["request"]["actions"][0]["value"]  # the real signed payload, as sent to the app
    reply = await bot_message(pg, ts, "Deploying to *production*")  # the whole sentence: it may still be streaming
    assert "production" in reply["text"]


async def test_refusal_reaches_the_other_user_as_an_ephemeral(pg: Playground, http: aiohttp.ClientSession) -> None:
    _, said = await post(http, pg, "say", {"user": "U_ALICE", "channel": "C_GENERAL", "text": f"{BOT} pick one"})
    question = await bot_message(pg, said["message"]["ts"], "Which environment")
    body = {"user": "U_BOB", "channel": "C_GENERAL", "ts": question["ts"], "label": "staging"}
    status, clicked = await post(http, pg, "click", body)
    assert status == 200 and clicked["ok"]
    assert pg.workspace is not None
    refusal = await pg.workspace.wait_for_ephemeral(user="U_BOB", timeout=10)
    assert "U_ALICE" in refusal["text"]
    async with http.get(f"{pg.url}api/state") as response:
        state = await response.json()
    assert [e["user"] for e in state["ephemerals"]] == ["U_BOB"]


async def test_checkboxes_toggle_then_submit(pg: Playground, http: aiohttp.ClientSession) -> None:
    _, said = await post(http, pg, "say", {"user": "U_ALICE", "channel": "C_GENERAL", "text": f"{BOT} plan"})
    ts = said["message"]["ts"]
    question = await bot_message(pg, ts, "Which features")
    target = {"user": "U_ALICE", "channel": "C_GENERAL", "ts": question["ts"]}
    for label in ("Search", "Dark mode"):
        status, toggled = await post(http, pg, "toggle", {**target, "label": label})
        assert status == 200 and toggled["ok"]
    picked = [
        o["text"]["text"]
        for entry in toggled["values"].values()
        for element in entry.values()
        for o in element.get("selected_options", [])
    ]
    assert picked == ["Dark mode", "Search"]  # the group's selection, in option order
    status, submitted = await post(http, pg, "click", {**target, "label": "Submit"})
    assert status == 200 and submitted["ok"]
    reply = await bot_message(pg, ts, "Planned:")
    assert "Dark mode, Search" in reply["text"]


async def test_modal_errors_then_answer(pg: Playground, http: aiohttp.ClientSession) -> None:
    _, said = await post(http, pg, "say", {"user": "U_ALICE", "channel": "C_GENERAL", "text": f"{BOT} name it"})
    ts = said["message"]["ts"]
    question = await bot_message(pg, ts, "project called")
    await post(http, pg, "click", {"user": "U_ALICE", "channel": "C_GENERAL", "ts": question["ts"], "label": "Answer"})
    assert pg.workspace is not None
    view = await pg.workspace.wait_for_view(user="U_ALICE", predicate=is_answer_form, timeout=10)
    block = next(b for b in view["blocks"] if b["type"] == "input")
    field = {block["block_id"]: {block["element"]["action_id"]: "   "}}

    status, blank = await post(http, pg, "submit_view", {"user": "U_ALICE", "view_id": view["id"], "values": {}})
    assert status == 400 and "required" in blank["error"]  # Slack's client refuses an empty required input
    status, spaces = await post(http, pg, "submit_view", {"user": "U_ALICE", "view_id": view["id"], "values": field})
    assert status == 200 and spaces["errors"] == {block["block_id"]: "Please write an answer."}
    assert spaces["ack"]["response"]["response_action"] == "errors"

    field[block["block_id"]][block["element"]["action_id"]] = "Apollo"
    status, done = await post(http, pg, "submit_view", {"user": "U_ALICE", "view_id": view["id"], "values": field})
    assert status == 200 and done["ok"] and done["errors"] == {}
    assert pg.workspace.state.top_view("U_ALICE") is None
    assert "Apollo" in (await bot_message(pg, ts, "project is called"))["text"]


async def test_close_view(pg: Playground, http: aiohttp.ClientSession) -> None:
    _, said = await post(http, pg, "say", {"user": "U_ALICE", "channel": "C_GENERAL", "text": f"{BOT} free text"})
    question = await bot_message(pg, said["message"]["ts"], "project called")
    await post(http, pg, "click", {"user": "U_ALICE", "channel": "C_GENERAL", "ts": question["ts"], "label": "Answer"})
    assert pg.workspace is not None
    view = await pg.workspace.wait_for_view(user="U_ALICE", predicate=is_answer_form, timeout=10)
    status, closed = await post(http, pg, "close_view", {"user": "U_ALICE", "view_id": view["id"]})
    assert status == 200 and closed == {"ok": True, "ack": None}  # the bot's modal has no notify_on_close
    assert pg.workspace.state.top_view("U_ALICE") is None


@pytest.mark.parametrize(
    ("name", "body", "status", "needle"),
    [
        ("say", {"user": "U_NOBODY", "channel": "C_GENERAL", "text": "hi"}, 400, "no person"),
        ("say", {"user": "U_BOT", "channel": "C_GENERAL", "text": "hi"}, 400, "no person"),
        ("say", {"user": "U_ALICE", "channel": "C_GENERAL", "text": "   "}, 400, "write something"),
        ("say", {"user": "U_ALICE", "channel": "C_NOWHERE", "text": "hi"}, 400, "no channel"),
        ("say", {"user": "U_ALICE", "text": "hi"}, 400, "channel must be"),
        ("click", {"user": "U_ALICE", "channel": "C_GENERAL", "ts": "1.000000", "label": "x"}, 400, "deleted"),
        ("select", {"user": "U_ALICE", "channel": "C_GENERAL", "ts": "1.0", "labels": []}, 400, "labels"),
        ("submit_view", {"user": "U_ALICE", "view_id": "V_NONE"}, 400, "not open"),
        ("submit_view", {"user": "U_ALICE", "view_id": "V1", "values": {"b": "flat"}}, 400, "values must be"),
        ("close_view", {"user": "U_ALICE", "view_id": "V_NONE"}, 400, "no view"),
    ],
)
async def test_bad_requests_answer_400(
    pg: Playground, http: aiohttp.ClientSession, name: str, body: Any, status: int, needle: str
) -> None:
    got_status, answer = await post(http, pg, name, body)
    assert got_status == status and answer["ok"] is False and needle in answer["error"]


async def test_posts_must_be_json_from_this_origin(pg: Playground, http: aiohttp.ClientSession) -> None:
    form = {"user": "U_ALICE", "channel": "C_GENERAL", "text": "hi"}
    async with http.post(f"{pg.url}api/say", data=form) as response:
        assert response.status == 415
    headers = {"Origin": "https://evil.example"}
    async with http.post(f"{pg.url}api/say", json=form, headers=headers) as response:
        assert response.status == 403
    async with http.post(f"{pg.url}api/say", data=b"[1, 2]", headers={"Content-Type": "application/json"}) as response:
        assert response.status == 400
    assert pg.workspace is not None and pg.workspace.messages("C_GENERAL") == []


async def read_events(response: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    async for raw in response.content:
        line = raw.decode().strip()
        if line.startswith("data: "):
            yield json.loads(line[6:])


async def test_event_stream_starts_with_a_snapshot_then_goes_live(pg: Playground, http: aiohttp.ClientSession) -> None:
    async with http.get(f"{pg.url}api/events") as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        events = read_events(response)
        first = await anext(events)
        assert first["type"] == "snapshot" and first["state"]["bot"]["id"] == "U_BOT"
        await post(http, pg, "say", {"user": "U_ALICE", "channel": "C_GENERAL", "text": f"{BOT} deploy"})
        seen: list[dict[str, Any]] = []

        async def until_question() -> None:
            async for event in events:
                seen.append(event)
                if event["type"] == "log" and event["entry"]["name"] == "chat.postMessage":
                    return  # logged once answered, so after the message event it caused

        await asyncio.wait_for(until_question(), 10)
    kinds = {e["type"] for e in seen}
    assert any(e["type"] == "message" and "Which environment" in e["message"]["text"] for e in seen)
    assert {"message", "log", "agent_session"} <= kinds  # the thread's agent session: the bot works (agent_view)
    logged = [e["entry"] for e in seen if e["type"] == "log"]
    names = {x["name"] for x in logged}
    assert {"app_mention", "auth.test", "agents.sessions.setStatus", "chat.postMessage"} <= names
    assert [x["seq"] for x in logged] == sorted(x["seq"] for x in logged)


async def test_invalid_blocks_show_slack_error_with_json_pointers(pg: Playground) -> None:
    assert pg.workspace is not None and pg.ui is not None
    client = AsyncWebClient(token=pg.workspace.fake.bot_token, base_url=pg.workspace.api_url)
    blocks = [{"type": "actions", "elements": [{"type": "button", "text": {"type": "plain_text", "text": "x" * 80}}]}]
    with pytest.raises(Exception, match="invalid_blocks"):
        await client.chat_postMessage(channel="C_GENERAL", text="t", blocks=blocks)

    async def logged() -> dict[str, Any]:
        while True:
            entry = next((e for e in pg.ui.hub.log if e["name"] == "chat.postMessage"), None)  # type: ignore[union-attr]
            if entry is not None:
                return entry
            await asyncio.sleep(0.01)

    entry = await asyncio.wait_for(logged(), 5)
    assert entry["ok"] is False and entry["error"] == "invalid_blocks"
    assert any("json-pointer:/blocks/0/elements/0/text" in m for m in entry["messages"])
    assert entry["request"]["blocks"] == blocks
    assert "xoxb" not in json.dumps(list(pg.ui.hub.log))  # no token in the developer log


# -- pure pieces ------------------------------------------------------------------------------------


def test_log_entries() -> None:
    call = ApiCall(
        method="chat.postMessage",
        params={"channel": "C1", "blocks": '[{"type": "divider"}]', "token": "[redacted]"},
        response={"ok": False, "error": "invalid_blocks", "response_metadata": {"messages": ["[ERROR] bad"]}},
        status=200,
        duration_ms=1.234,
        at=1.0,
        error="invalid_blocks",
    )
    entry = api_call_entry(3, call)
    assert entry["seq"] == 3 and entry["ok"] is False and entry["messages"] == ["[ERROR] bad"]
    assert entry["request"]["blocks"] == [{"type": "divider"}] and entry["duration_ms"] == 1.23
    assert decode_params({"view": "{not json"}) == {"view": "{not json"}
    assert error_messages("nope") == [] and error_messages({"response_metadata": {}}) == []

    form = "payload=" + aiohttp.helpers.quote('{"type": "block_actions"}', safe="")
    ack = Ack("block_actions", 200, 4000.0, "", None, form, "application/x-www-form-urlencoded")
    slow = ack_entry(4, ack)
    assert slow["kind"] == "interaction" and slow["request"] == {"type": "block_actions"}
    assert slow["ok"] is False and "3 s" in slow["error"]
    failed = ack_entry(5, Ack("app_mention", 401, 2.0, "", None, "{}", "application/json"))
    assert failed["kind"] == "event" and failed["error"] == "HTTP 401"


def test_labels_never_show_secrets() -> None:
    assert redis_label("redis://:s3cret@db.example:6380/2") == "Redis at db.example:6380/2"
    assert redis_label("rediss://user:pw@cache") == "Redis at cache:6379"
    assert redis_label("unix:///tmp/redis.sock") == "Redis on a unix socket"
    live = settings(openai_api_key=SecretStr("sk-x"), openai_base_url="http://10.0.0.5:8000/v1", openai_model="m")
    assert model_label(live) == "m via 10.0.0.5"
    model, kind, label = make_model(live)
    assert isinstance(model, OpenAIChatModel) and kind == "openai" and "sk-x" not in label


def test_redis_label_never_shows_the_password() -> None:
    assert redis_label("redis://:pw@127.0.0.1:1/0") == "Redis at 127.0.0.1:1/0"


async def test_unreachable_redis_url_is_a_clear_config_error() -> None:
    from bot.errors import ConfigError

    with pytest.raises(ConfigError, match=r"cannot reach Redis at 127\.0\.0\.1:1 .*check REDIS_URL") as info:
        async with Playground(settings(redis_url=SecretStr("redis://:pw@127.0.0.1:1/0")), ui_port=0):
            pass
    assert "pw" not in str(info.value)


async def test_a_redis_that_never_answers_is_a_clear_config_error_not_a_hang() -> None:
    """A Redis that accepts the connection and never answers (a stopped process, a firewall): the playground gives
    up with the error serve gives (before: it waited forever, printing nothing)."""
    from bot.errors import ConfigError
    from bot.serving import REDIS_CHECK_SECONDS

    silent = await asyncio.start_server(lambda _r, _w: None, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    try:
        with pytest.raises(ConfigError, match=rf"did not answer within {REDIS_CHECK_SECONDS:.0f} s"):
            async with asyncio.timeout(REDIS_CHECK_SECONDS + 20):  # before: a hang (TimeoutError here)
                async with Playground(settings(redis_url=SecretStr(f"redis://127.0.0.1:{port}/0")), ui_port=0):
                    pass
    finally:
        silent.close()


@pytest.mark.real_redis
async def test_real_redis_url_is_used(real_redis: Any, real_redis_env: dict[str, str]) -> None:
    url, cluster = real_redis_env["REDIS_URL"], real_redis_env["REDIS_CLUSTER"] == "true"
    async with Playground(settings(redis_url=SecretStr(url), redis_cluster=cluster), ui_port=0) as playground:
        assert playground.info.redis == "redis" and playground.info.redis_label == redis_label(url)


async def test_run_playground_prints_the_url_and_stops_on_cancel(capsys: pytest.CaptureFixture[str]) -> None:
    ready = asyncio.Event()
    task = asyncio.create_task(run_playground(settings(), ui_port=0, ready=ready))
    await asyncio.wait_for(ready.wait(), 10)
    out = capsys.readouterr().out
    match = re.search(r"Playground: (http://127\.0\.0\.1:\d+/)  \(demo model \(offline\); in-process Redis\)", out)
    assert match, out
    async with aiohttp.ClientSession() as http, http.get(match.group(1) + "api/state") as response:
        assert response.status == 200
    api = re.search(r"Fake Slack Web API: (http://127\.0\.0\.1:\d+/\S*)", out)  # as docs/playground.md lists it
    assert api, out
    async with aiohttp.ClientSession() as http, http.post(api.group(1) + "auth.test") as response:
        assert await response.json() == {"ok": False, "error": "not_authed"}  # Slack's answer without a token
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.ClientConnectionError):
            await http.get(match.group(1))


@pytest.mark.parametrize(
    ("agent", "expected"),
    [
        (
            None,
            "Agent: bot.playground.demo_agent:build (tools: ask_user, deploy, lookup_ticket, refund, restart_service)",
        ),
        ("bot.playground.demo_agent:build", "Agent: bot.playground.demo_agent:build (tools: ask_user, deploy, lookup"),
    ],
    ids=["the demo agent by default", "AGENT"],
)
async def test_the_banner_names_the_agent_and_its_tools(
    capsys: pytest.CaptureFixture[str], agent: str | None, expected: str
) -> None:
    ready = asyncio.Event()
    task = asyncio.create_task(run_playground(settings(agent=agent), ui_port=0, ready=ready))
    try:
        await asyncio.wait_for(ready.wait(), 10)
        assert expected in capsys.readouterr().out
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)


async def test_busy_port_is_a_config_error() -> None:
    async with Playground(settings(), ui_port=0) as first:
        port = int(first.url.rsplit(":", 1)[1].strip("/"))
        from bot.errors import ConfigError

        with pytest.raises(ConfigError, match="set PORT"):
            async with Playground(settings(), ui_port=port):
                pass


async def test_the_home_tab_and_the_timing_controls_through_the_endpoints(
    pg: Playground, http: aiohttp.ClientSession
) -> None:
    """The developer panel shortens the deadline; the acting user opens Home, sees the question waiting there
    and answers it with a click on Home; a bad timing value is a 400 that changes nothing."""
    status, set_timing = await post(http, pg, "timing", {"ask_ttl_seconds": 90, "remind_after": 30, "remind_max": 2})
    assert status == 200 and set_timing["timing"]["ask_ttl_seconds"] == 90
    assert set_timing["timing"]["remind_after"] == 30 and set_timing["timing"]["remind_max"] == 2
    # what the panel says of a reminder's lateness (before: nothing, and reminders came ~10 s after their time)
    assert set_timing["timing"]["coalesce_seconds"] == COALESCE_SECONDS
    status, refused = await post(http, pg, "timing", {"ask_ttl_seconds": -5})
    assert status == 400 and "ask_ttl_seconds" in refused["error"]
    async with http.get(f"{pg.url}api/state") as response:
        assert (await response.json())["timing"]["ask_ttl_seconds"] == 90
    _, said = await post(http, pg, "say", {"user": "U_ALICE", "channel": "C_GENERAL", "text": f"{BOT} deploy"})
    ts = said["message"]["ts"]
    await bot_message(pg, ts, "Which environment")
    assert pg.bot is not None
    state = await pg.bot.agent.get_run((await pg.bot.agent.store.client.keys("*run:*"))[0].decode().split("{")[1][:-1])
    assert state.pending is not None and state.pending.expires_at is not None
    assert 80 <= (state.pending.expires_at - state.pending.suspended_at).total_seconds() <= 100  # the new deadline
    status, opened = await post(http, pg, "open_home", {"user": "U_ALICE"})
    assert status == 200 and opened["ok"] and opened["ack"]["name"] == "app_home_opened"
    assert pg.workspace is not None
    for _ in range(100):
        home = pg.workspace.state.home_views.get("U_ALICE")
        if home and "Which environment" in json.dumps(home):
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the Home tab was not published with the question")
    status, clicked = await post(http, pg, "home_click", {"user": "U_ALICE", "label": "production"})
    assert status == 200 and clicked["ok"]
    reply = await bot_message(pg, ts, "Deploying to *production*")  # the whole sentence: it may still be streaming
    assert "production" in reply["text"]


async def home_with(pg: Playground, http: aiohttp.ClientSession, text: str, needle: str) -> str:
    """Alice mentions the bot with ``text`` and opens her Home; returns the thread once the Home shows ``needle``."""
    _, said = await post(http, pg, "say", {"user": "U_ALICE", "channel": "C_GENERAL", "text": f"{BOT} {text}"})
    await bot_message(pg, said["message"]["ts"], needle)
    status, _ = await post(http, pg, "open_home", {"user": "U_ALICE"})
    assert status == 200 and pg.workspace is not None
    await pg.workspace.fake.wait_until(
        lambda: needle in json.dumps(pg.workspace.state.home_views.get("U_ALICE") if pg.workspace else None),
        timeout=10,
        what=f"Alice's Home showing {needle!r}",
    )
    return str(said["message"]["ts"])


async def test_ticks_and_menus_on_the_home_tab_through_the_endpoints(
    pg: Playground, http: aiohttp.ClientSession
) -> None:
    """On Home, checkboxes are ticked one by one (home_toggle answers the view's state so far) and Submit
    (home_click) sends them; a menu choice (home_select) answers a single-select question with many options.
    Unknown labels are a 400 that sends nothing."""
    ts = await home_with(pg, http, "plan", "Which features")
    for label in ("Dark mode", "Search"):
        status, ticked = await post(http, pg, "home_toggle", {"user": "U_ALICE", "label": label})
        assert status == 200 and ticked["ok"] and ticked["ack"]["name"] == "block_actions"
    picked = [e["selected_options"] for by in ticked["values"].values() for e in by.values() if "selected_options" in e]
    assert [[o["text"]["text"] for o in p] for p in picked] == [["Dark mode", "Search"]]
    status, refused = await post(http, pg, "home_toggle", {"user": "U_ALICE", "label": "Nope"})
    assert status == 400 and "Nope" in refused["error"]
    status, clicked = await post(http, pg, "home_click", {"user": "U_ALICE", "label": "Submit"})
    assert status == 200 and clicked["ok"]
    await bot_message(pg, ts, "Planned: Dark mode, Search")
    ts = await home_with(pg, http, "many cities", "Which city")
    status, refused = await post(http, pg, "home_select", {"user": "U_ALICE", "labels": []})
    assert status == 400 and "labels" in refused["error"]
    status, chosen = await post(http, pg, "home_select", {"user": "U_ALICE", "labels": ["Lisbon"]})
    assert status == 200 and chosen["ok"]
    reply = await bot_message(pg, ts, "The next meetup is in")
    assert "Lisbon" in reply["text"]
