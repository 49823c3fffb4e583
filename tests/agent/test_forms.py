"""Forms from MCP elicitation schemas: how each property is asked, what can't be asked, how replies are checked,
typed and shown."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
import pytest

from bot.agent.forms import Form, FormReply, FormUnsupported
from bot.agent.mcp.elicitation import question_for
from bot.errors import AnswerError

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "email": {"type": "string", "format": "email", "title": "Email"},
        "count": {"type": "integer", "minimum": 1, "maximum": 5},
        "ratio": {"type": "number"},
        "ok": {"type": "boolean"},
        "size": {"type": "string", "enum": ["s", "l"], "enumNames": ["Small", "Large"]},
        "where": {"type": "string", "oneOf": [{"const": "eu", "title": "Europe"}, {"const": "us", "title": "US"}]},
        "tags": {"type": "array", "items": {"anyOf": [{"const": "a", "title": "A"}, {"const": "b"}]}, "maxItems": 1},
    },
    "required": ["email", "count"],
}


def test_each_property_becomes_a_field_of_its_kind() -> None:
    form = Form.from_schema(SCHEMA)
    kinds = {f.name: f.kind for f in form.fields}
    assert kinds == {
        "email": "text",
        "count": "integer",
        "ratio": "number",
        "ok": "boolean",
        "size": "choice",
        "where": "choice",
        "tags": "choices",
    }
    by_name = {f.name: f for f in form.fields}
    assert by_name["size"].labels == ["Small", "Large"] and by_name["where"].labels == ["Europe", "US"]
    assert by_name["tags"].labels == ["A", "b"] and by_name["ok"].labels == ["Yes", "No"]
    assert [f.name for f in form.fields if f.required] == ["email", "count"]


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"type": "object", "properties": {"addr": {"type": "object", "properties": {}}}}, "'addr' has type 'object'"),
        ({"type": "object", "properties": {"names": {"type": "array", "items": {"type": "string"}}}}, "free values"),
        ({"type": "object", "properties": {"x": {"type": "null"}}}, "type 'null'"),
        ({"type": "object", "properties": {f"f{i}": {"type": "string"} for i in range(21)}}, "21 fields"),
        ({"type": "array"}, "not an object"),
    ],
)
def test_what_a_person_cant_be_asked_is_refused_naming_why(schema: dict[str, Any], problem: str) -> None:
    with pytest.raises(FormUnsupported, match=problem):
        Form.from_schema(schema)


def test_replies_are_checked_field_by_field_and_typed() -> None:
    form = Form.from_schema(SCHEMA)
    good = FormReply(
        action="accept",
        content={
            "email": "ada@example.com",
            "count": "3",
            "ratio": "0.5",
            "ok": "No",
            "size": "Large",
            "where": "eu",
            "tags": ["A"],
        },
    )
    typed = json.loads(form.validate_reply(good.to_json()))
    assert typed == {
        "action": "accept",
        "content": {
            "email": "ada@example.com",
            "count": 3,
            "ratio": 0.5,
            "ok": False,
            "size": "l",
            "where": "eu",
            "tags": ["a"],
        },
    }
    assert form.display(form.validate_reply(good.to_json())).startswith("Email: ada@example.com, count: 3")
    bad = {"email": "not-an-email", "count": "9", "ratio": "nan", "ok": "maybe", "size": "XL", "tags": ["A", "b"]}
    problems = form.problems(bad)
    assert problems == {
        "email": "must be a valid email",
        "count": "must be at most 5",
        "ratio": "must be a number",
        "ok": "answer Yes or No",
        "size": "'XL' is not one of the choices",
        "tags": "pick at most 1",
    }
    assert form.problems({})["email"] == "please fill this in" and "ratio" not in form.problems({})
    with pytest.raises(AnswerError, match="Email: must be a valid email"):
        form.validate_reply(FormReply(action="accept", content=bad).to_json())
    with pytest.raises(AnswerError, match="several fields"):
        form.validate_reply("just some text")
    assert json.loads(form.validate_reply('{"action":"decline","content":{"x":1}}')) == {"action": "decline"}


def test_a_form_of_one_field_takes_the_plain_answer_and_a_url_form_takes_done() -> None:
    one = Form.from_schema({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    assert json.loads(one.validate_reply("12")) == {"action": "accept", "content": {"n": 12}}
    assert one.display(one.validate_reply("12")) == "12"
    with pytest.raises(AnswerError, match="n: must be a whole number"):
        one.validate_reply("1.5")
    with pytest.raises(AnswerError, match="n: please fill this in"):
        one.validate_reply("   ")
    params = types.ElicitRequestURLParams(
        mode="url", message="Sign in", url="https://auth.example.com/x", elicitation_id="e1"
    )
    question = question_for(params)
    assert question["options"] == [{"label": "Done"}] and "https://auth.example.com/x" in question["question"]
    form = Form.model_validate(question["form"])
    assert json.loads(form.validate_reply("Done")) == {"action": "accept", "content": {}}
    assert form.display(form.validate_reply("Done")) == "Done"


@pytest.mark.parametrize(
    ("prop", "problem"),
    [
        ({"type": "string", "enum": ["a", "b"], "enumNames": ["b", "a"]}, "named like another choice's value"),
        ({"type": "string", "enum": ["one", "two"], "enumNames": ["Same", "Same"]}, "alike"),
        ({"type": "string", "enum": [str(i) for i in range(101)]}, "101 choices"),
        ({"type": "array", "items": {"enum": [str(i) for i in range(150)]}}, "150 choices"),
    ],
)
def test_choices_a_person_could_not_tell_apart_are_refused_in_any_form(prop: dict[str, Any], problem: str) -> None:
    for schema in (
        {"type": "object", "properties": {"x": prop}},
        {"type": "object", "properties": {"x": prop, "y": {"type": "string"}}},
    ):
        with pytest.raises(FormUnsupported, match=problem):
            Form.from_schema(schema)


def test_choices_are_matched_exactly_first_and_a_blank_name_shows_the_value() -> None:
    form = Form.from_schema(
        {"type": "object", "properties": {"x": {"type": "string", "enum": [" a ", "b"], "enumNames": ["", "Bee"]}}}
    )
    assert form.fields[0].labels == [" a ", "Bee"]
    assert json.loads(form.validate_reply(" a "))["content"] == {"x": " a "}
    assert json.loads(form.validate_reply("bee"))["content"] == {"x": "b"}


def test_numbers_too_large_or_too_long_are_refused_or_kept_exact() -> None:
    one = Form.from_schema({"type": "object", "properties": {"n": {"type": "integer"}, "r": {"type": "number"}}})
    huge = FormReply(action="accept", content={"r": "9" * 400}).to_json()
    with pytest.raises(AnswerError, match="must be a number"):
        one.validate_reply(huge)
    exact = json.loads(one.validate_reply(FormReply(action="accept", content={"n": "9007199254740993"}).to_json()))
    assert exact["content"] == {"n": 9007199254740993}
    assert (
        Form.from_schema({"type": "object", "properties": {"a": {"type": "string"}}, "required": "a"})
        .fields[0]
        .required
        is False
    )


def test_newer_generation_a_round_asking_to_open_a_link_not_allowed_is_refused_before_anyone_is_asked() -> None:
    """The newer generation's input_required round goes through the same check (bot.agent.forms.url_to_show) as
    the older generation's elicitation/create."""
    from bot.agent.forms import FormUnsupported
    from bot.agent.mcp.elicitation import InputRound

    def round_asking(url: str) -> types.InputRequiredResult:
        params = types.ElicitRequestURLParams(mode="url", message="Sign in", url=url, elicitation_id="e1")
        return types.InputRequiredResult(
            input_requests={"login": types.ElicitRequest(params=params)}, request_state="s"
        )

    with pytest.raises(FormUnsupported, match="scheme is javascript:; only https:// links are shown"):
        InputRound.of(round_asking("javascript:alert(1)"), round=1)
    with pytest.raises(FormUnsupported, match="scheme is http:"):
        InputRound.of(round_asking("http://169.254.169.254/latest/meta-data/"), round=1)
    allowed = InputRound.of(round_asking("http://intranet.example/login"), round=1, url_schemes=("https", "http"))
    question = allowed.next_question(url_schemes=("https", "http"))
    assert question is not None and "http://intranet.example/login" in question["question"]
    assert InputRound.of(round_asking("HTTPS://Auth.Example.com/x"), round=1).next_question() is not None


def test_an_elicitation_message_longer_than_a_question_may_be_is_refused() -> None:
    """An MCP server's message is an outside party's text like an MCP client's question: the same bound
    (bot.agent.text.MAX_QUESTION), so neither is kept in Redis nor shown beyond it."""
    from bot.agent.forms import FormUnsupported
    from bot.agent.text import MAX_QUESTION

    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    assert question_for(types.ElicitRequestFormParams(message="m" * (MAX_QUESTION - 100), requested_schema=schema))
    long = types.ElicitRequestFormParams(message="m" * 100_000, requested_schema=schema)
    with pytest.raises(FormUnsupported, match=f"its message has 100000 characters; at most {MAX_QUESTION}"):
        question_for(long)
