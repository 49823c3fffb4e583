"""A stdio MCP server that asks its user questions (elicitation), written with the SDK's ``MCPServer``.

Its questions are resolvers (``Resolve(...)`` returning ``Elicit``), so the SDK asks them the way the protocol
generation the client chose allows: an ``input_required`` result on the newer one, an ``elicitation/create``
request over the session on the older one. ``MCP_TEST_STATE_KEY`` (32+ characters) makes every instance seal its
``requestState`` with that key (the SDK's ``RequestStateSecurity(keys=[...])``), so one instance accepts another's;
without it each process has a key of its own. ``python asking.py [NAME]``; every tool that finishes appends a line
to the file named by ``MCP_TEST_RUNS`` (if set), so a test can count how often a tool body ran.

- ``deploy(service)``: asks "Deploy <service> now?" (one boolean field ``confirm``).
- ``pick_region()``: one choice (``region``: eu / us / ap, titled).
- ``pick_tags()``: several choices (``tags``: an array of enum, 1 to 2 of them).
- ``set_replicas()``: a number (``replicas``: an integer 1..10).
- ``rename()``: free text (``name``).
- ``profile()``: a form of four fields (``name`` text, ``age`` integer, ``color`` choice, ``subscribe`` boolean).
- ``two_questions()``: two questions in one round (``first`` text, ``second`` boolean).
- ``two_at_once()`` (older generation only: ``ctx.elicit``): two questions sent at the same moment (``a``
  boolean, ``b`` text).
- ``die_while_asking()`` (older generation only): asks, and the server process exits half a second later.
- ``open_link(url)`` (older generation only: ``ctx.elicit_url``): asks the person to open ``url``; the line written
  says the answer, or ``refused: <the client's error>``.
- ``rename_slowly()`` (older generation only): asks for a name (``b`` text), then works on with the answer until
  the file named by ``MCP_TEST_GO`` exists.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Annotated, Literal

from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
from mcp.server.mcpserver import Context, MCPServer, RequestStateSecurity
from mcp.server.mcpserver.resolve import Elicit, Resolve
from pydantic import BaseModel, Field

shared_key = os.environ.get("MCP_TEST_STATE_KEY")
security = RequestStateSecurity(keys=[shared_key], ttl=3600) if shared_key else None
server = MCPServer(sys.argv[1] if len(sys.argv) > 1 else "asking", log_level="WARNING", request_state_security=security)


def ran(line: str) -> str:
    path = os.environ.get("MCP_TEST_RUNS")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    return line


def outcome(name: str, answer: ElicitationResult[BaseModel]) -> str:
    if isinstance(answer, AcceptedElicitation):
        return ran(f"{name}: accept {answer.data.model_dump_json()}")
    return ran(f"{name}: {answer.action}")


class Confirm(BaseModel):
    confirm: bool = Field(description="Say yes to deploy")


def ask_confirm(service: str) -> Elicit[Confirm]:
    return Elicit(f"Deploy {service} now?", Confirm)


@server.tool(structured_output=False)
async def deploy(service: str, answer: Annotated[ElicitationResult[Confirm], Resolve(ask_confirm)]) -> str:
    """Deploy a service, after asking."""
    return outcome(f"deploy {service}", answer)


class Region(BaseModel):
    region: Literal["eu", "us", "ap"] = Field(
        json_schema_extra={
            "oneOf": [
                {"const": "eu", "title": "Europe"},
                {"const": "us", "title": "Americas"},
                {"const": "ap", "title": "Asia-Pacific"},
            ]
        }
    )


def ask_region() -> Elicit[Region]:
    return Elicit("Which region?", Region)


@server.tool(structured_output=False)
async def pick_region(answer: Annotated[ElicitationResult[Region], Resolve(ask_region)]) -> str:
    """Pick a region."""
    return outcome("pick_region", answer)


class Tags(BaseModel):
    tags: list[Literal["red", "green", "blue"]] = Field(min_length=1, max_length=2)


def ask_tags() -> Elicit[Tags]:
    return Elicit("Which tags?", Tags)


@server.tool(structured_output=False)
async def pick_tags(answer: Annotated[ElicitationResult[Tags], Resolve(ask_tags)]) -> str:
    """Pick tags."""
    return outcome("pick_tags", answer)


class Replicas(BaseModel):
    replicas: int = Field(ge=1, le=10)


def ask_replicas() -> Elicit[Replicas]:
    return Elicit("How many replicas?", Replicas)


@server.tool(structured_output=False)
async def set_replicas(answer: Annotated[ElicitationResult[Replicas], Resolve(ask_replicas)]) -> str:
    """Set the replica count."""
    return outcome("set_replicas", answer)


class Name(BaseModel):
    name: str


def ask_name() -> Elicit[Name]:
    return Elicit("What should it be called?", Name)


@server.tool(structured_output=False)
async def rename(answer: Annotated[ElicitationResult[Name], Resolve(ask_name)]) -> str:
    """Rename it."""
    return outcome("rename", answer)


class Profile(BaseModel):
    name: str = Field(title="Name")
    age: int = Field(title="Age", ge=0, le=150)
    color: Literal["red", "green"] = Field(title="Favourite colour")
    subscribe: bool = Field(title="Subscribe", default=False)


def ask_profile() -> Elicit[Profile]:
    return Elicit("Tell me about you", Profile)


@server.tool(structured_output=False)
async def profile(answer: Annotated[ElicitationResult[Profile], Resolve(ask_profile)]) -> str:
    """Fill in a profile."""
    return outcome("profile", answer)


class First(BaseModel):
    first: str


class Second(BaseModel):
    second: bool


def ask_first() -> Elicit[First]:
    return Elicit("First question?", First)


def ask_second() -> Elicit[Second]:
    return Elicit("Second question?", Second)


@server.tool(structured_output=False)
async def two_questions(
    one: Annotated[ElicitationResult[First], Resolve(ask_first)],
    two: Annotated[ElicitationResult[Second], Resolve(ask_second)],
) -> str:
    """Ask two things."""
    return ran(f"two_questions: {outcome('first', one)} | {outcome('second', two)}")


class A(BaseModel):
    a: bool


class B(BaseModel):
    b: str


@server.tool(structured_output=False)
async def two_at_once(ctx: Context) -> str:
    """Ask two things at once."""
    a, b = await asyncio.gather(ctx.elicit("Question A?", A), ctx.elicit("Question B?", B))
    return ran(f"two_at_once: {outcome('a', a)} | {outcome('b', b)}")


@server.tool(structured_output=False)
async def die_while_asking(ctx: Context) -> str:
    """Ask, and die before the answer comes."""
    asyncio.get_running_loop().call_later(0.5, os._exit, 3)
    answer = await ctx.elicit("Still there?", B)
    return ran(f"die_while_asking: {answer.action}")


@server.tool(structured_output=False)
async def open_link(url: str, ctx: Context) -> str:
    """Ask the person to open a link (URL-mode elicitation)."""
    try:
        answer = await ctx.elicit_url("Sign in to continue", url, "e-1")
    except Exception as exc:  # the client refused the request (a JSON-RPC error)
        return ran(f"open_link: refused: {exc}")
    return ran(f"open_link: {answer.action}")


@server.tool(structured_output=False)
async def rename_slowly(ctx: Context) -> str:
    """Ask for a name, then work on with the answer until the file named by MCP_TEST_GO exists."""
    answer = await ctx.elicit("What should it be called?", B)
    go = os.environ["MCP_TEST_GO"]
    while not os.path.exists(go):  # noqa: ASYNC110, ASYNC240 - another process's signal: a file, polled
        await asyncio.sleep(0.05)
    return ran(f"rename_slowly: {answer.action}")


if __name__ == "__main__":
    server.run()
