"""ask_user: input validation, fallback text, answer validation and the result the model sees."""

from __future__ import annotations

import pytest

from bot.agent import ask_user_tool, make_ask_user_tool
from bot.agent.ask_user import AskUserInput, AskUserPayload, answer_result, validate_answer
from bot.agent.tools import ToolContext, ToolInputError, ToolSuspended
from bot.errors import AnswerError

OPTIONS = [{"label": "api", "description": "The API service"}, {"label": "web"}]


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({"question": ""}, "question must not be empty"),
        ({"question": "   \n\t"}, "question must not be empty"),
        ({}, "question"),
        ({"question": "Pick", "selection_mode": "multi_select"}, "requires options"),
        ({"question": "Pick", "options": [{"label": "a"}, {"label": "a"}]}, "unique; repeated: a"),
        ({"question": "Pick", "options": [{"label": " "}]}, "option label must not be empty"),
        ({"question": "Pick", "options": [{"description": "no label"}]}, "label"),
        ({"question": "Pick", "options": [{"label": "a"}], "selection_mode": "some"}, "selection_mode"),
        ({"question": "Pick", "options": "a,b"}, "options"),
    ],
)
def test_invalid_input_is_a_tool_input_error(args: dict[str, object], problem: str) -> None:
    with pytest.raises(ToolInputError) as info:
        ask_user_tool.parse_args(args)
    assert problem in str(info.value)
    assert str(info.value).startswith("invalid arguments for ask_user")


def test_selection_mode_defaults_and_aliases() -> None:
    q = AskUserInput.model_validate({"question": " Which? ", "options": OPTIONS})
    assert q.selection_mode == "single_select" and q.question == "Which?"
    q = AskUserInput.model_validate({"question": "Which?", "options": OPTIONS, "selectionMode": "multi_select"})
    assert q.selection_mode == "multi_select"
    q = AskUserInput.model_validate({"question": "Which?", "options": []})
    assert q.options is None and q.selection_mode is None


async def test_suspend_payload_has_input_shape_and_omits_mode_for_free_form() -> None:
    ctx = ToolContext(run_id="r", tool_call_id="c")
    with pytest.raises(ToolSuspended) as free:
        await ask_user_tool.execute({"question": "Why?"}, ctx)
    assert free.value.payload == {"question": "Why?"}
    with pytest.raises(ToolSuspended) as single:
        await ask_user_tool.execute({"question": "Which?", "options": OPTIONS}, ctx)
    assert single.value.payload == {
        "question": "Which?",
        "options": [{"label": "api", "description": "The API service"}, {"label": "web"}],
        "selection_mode": "single_select",
    }
    payload = AskUserPayload.model_validate(single.value.payload)
    assert payload.labels == ["api", "web"]


async def test_outside_a_run_returns_readable_fallback_text() -> None:
    text = await ask_user_tool.execute(
        {"question": "Which services?", "options": OPTIONS, "selection_mode": "multi_select"}
    )
    assert text.splitlines() == [
        "Question: Which services?",
        "Options (choose one or more; selection mode multi_select):",
        "1. api - The API service",
        "2. web",
    ]
    free = await ask_user_tool.execute({"question": "Name?"})
    assert "Question: Name?" in free and "free-form" in free


async def test_max_options_cap_is_a_tool_error() -> None:
    tool = make_ask_user_tool(max_options=3)
    with pytest.raises(ToolInputError, match="too many options \\(4\\); offer at most 3"):
        await tool.execute({"question": "q", "options": [{"label": str(i)} for i in range(4)]}, None)


SINGLE = {"question": "Which?", "options": OPTIONS, "selection_mode": "single_select"}
MULTI = {"question": "Which?", "options": OPTIONS, "selection_mode": "multi_select"}
FREE = {"question": "Why?"}


@pytest.mark.parametrize(
    ("payload", "data", "message"),
    [
        (FREE, ["a"], "must be a string"),
        (FREE, "  ", "must not be blank"),
        (SINGLE, ["api"], "must be a string"),
        (SINGLE, "", "must not be blank"),
        (SINGLE, 3, "must be a string"),
        (MULTI, "api", "must be a list"),
        (MULTI, [], "select at least one"),
        (MULTI, ["api", "nope"], "not among the offered options: 'nope'"),
        (MULTI, ["api", 1], "must be a list"),
    ],
)
def test_bad_answers_raise_value_errors(payload: dict[str, object], data: object, message: str) -> None:
    with pytest.raises(AnswerError, match=message) as info:
        validate_answer(data, payload)
    assert isinstance(info.value, ValueError)


def test_answers_are_normalized() -> None:
    assert validate_answer(["web", "api", "web"], MULTI) == ["web", "api"]
    assert validate_answer("  typed  ", SINGLE) == "typed"


def test_result_tells_option_from_typed_text_and_who() -> None:
    q = AskUserInput.model_validate(SINGLE)
    assert answer_result(q, "api", answered_by="U1") == {"answer": "api", "answer_type": "option", "answered_by": "U1"}
    typed = answer_result(q, "something else", answered_by=None)
    assert typed["answer_type"] == "typed_text" and "answered_by" not in typed
    multi = answer_result(AskUserInput.model_validate(MULTI), ["api"], answered_by="U2")
    assert multi == {"answers": ["api"], "answer_type": "options", "answered_by": "U2"}
    assert answer_result(AskUserInput.model_validate(FREE), "x", answered_by=None)["answer_type"] == "text"
