"""An MCP server's questions to a person during a tool call (elicitation), asked in the run.

The bot speaks both protocol generations of the installed ``mcp`` SDK (the server decides, see the SDK's
``Client(mode="auto")``):

- **Newer (2026-07-28 and later), durable.** ``tools/call`` answers with an ``input_required`` result: the
  questions (``inputRequests``) and an opaque ``requestState``. The tool suspends the run with the first
  question and this state (:data:`INPUT_KEY` in the suspend payload, stored with the run in Redis); each answer,
  claimed in whichever process receives it, resumes the run, the next question is asked, and once all are
  answered the call is sent again with ``inputResponses`` and ``requestState``, from any process. At most
  :data:`MAX_ROUNDS` rounds per call.
- **Older (2025-11-25 and before), live.** The server sends ``elicitation/create`` over the session in the
  middle of ``tools/call`` and waits on it, so the question is asked live
  (:mod:`bot.agent._loop.live_questions`): the answer reaches the process holding the session through Redis; if that
  process is gone, the call is asked again as an interrupted approval.

Questions map onto the bot's own (:func:`question_for`): a string field is a free-form question, an enum one
choice, an array of enum several, a boolean Yes / No, a number a free-form answer checked as a number; a form of
several fields is answered in one modal with a field each; a URL-mode request shows the link and a Done button
(https links only unless ``MCP_ELICIT_URL_SCHEMES`` says otherwise; any other is refused to the server,
:func:`bot.agent.forms.url_to_show`).
Each can be declined. Replies go back as ``accept`` (with the typed content) or ``decline``; a question nobody
answered in time goes back as ``cancel``. Sampling requests are refused (the bot offers no model to servers);
roots requests get an empty list.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from typing import Any

import mcp_types as types
from pydantic import BaseModel, ValidationError

from bot.agent.ask_user import AskUserOption, AskUserPayload
from bot.agent.forms import MAX_CHOICES, URL_SCHEMES, Form, FormReply, FormUnsupported, url_to_show
from bot.agent.mcp.tool import McpStateRefused, McpToolError
from bot.agent.text import MAX_QUESTION
from bot.agent.tools import ToolContext
from bot.errors import AnswerError

INPUT_KEY = "mcp_input"  # the suspend payload's key holding the call's pending input round
ASKED_AGAIN = (
    "(Asked again: the tool's server no longer accepted the earlier answer; it restarted, or waited too long.)"
)
Send = Callable[
    [dict[str, types.InputResponse] | None, str | None], Awaitable[types.CallToolResult | types.InputRequiredResult]
]
MAX_ROUNDS = 10  # input_required rounds per call (the SDK's own default)


def question_for(params: types.ElicitRequestParams, *, url_schemes: Collection[str] = URL_SCHEMES) -> dict[str, Any]:
    """The suspend payload (``AskUserPayload`` with its ``form``) asking ``params``. Raises
    :class:`FormUnsupported` for a request the bot can't ask (nested or unknown field types, too many choices, a
    URL-mode link whose scheme is not in ``url_schemes``, :func:`bot.agent.forms.url_to_show`)."""
    if isinstance(params, types.ElicitRequestURLParams):
        url = url_to_show(params.url, schemes=url_schemes)
        form = Form(url=url)
        text = f"{params.message}\n\nOpen {url} and press Done when you have finished there."
        return _payload(text, ["Done"], "single_select", form)
    form = Form.from_schema(dict(params.requested_schema))
    if not form.fields:
        return _payload(params.message, ["OK"], "single_select", form)
    if len(form.fields) > 1:
        listed = "\n".join(f"• {f.title}" + (f": {f.description}" if f.description else "") for f in form.fields)
        return _payload(f"{params.message}\n\n{listed}", None, None, form)
    field = form.fields[0]
    text = params.message + (f"\n\n{field.title}: {field.description}" if field.description else "")
    if field.kind in ("boolean", "choice"):
        return _payload(text, field.labels, "single_select", form)
    if field.kind == "choices":
        return _payload(text, field.labels, "multi_select", form)
    if field.kind in ("number", "integer"):
        text += "\n\n(Answer with a whole number.)" if field.kind == "integer" else "\n\n(Answer with a number.)"
    return _payload(text, None, None, form)


def elicit_result(answer: str | list[str] | None) -> types.ElicitResult:
    """The ``ElicitResult`` for a question's stored answer (a :class:`~bot.agent.forms.FormReply` JSON text);
    ``None`` (nobody answered in time) is ``cancel``."""
    if not isinstance(answer, str):
        return types.ElicitResult(action="cancel")
    reply = FormReply.from_json(answer)
    return types.ElicitResult(action=reply.action, content=reply.content if reply.action == "accept" else None)


class InputRound(BaseModel):
    """One ``input_required`` round of a call, stored with the run while its questions are asked:
    ``requests`` (key -> the elicitation request's params, as JSON), ``responses`` (key -> the answer's result, as
    JSON, with roots answered at once), ``asking`` (the key asked now), ``request_state`` (opaque, echoed back),
    ``round`` (1-based)."""

    request_state: str | None = None
    requests: dict[str, dict[str, Any]] = {}
    responses: dict[str, dict[str, Any]] = {}
    asking: str | None = None
    round: int = 1
    asked_again: bool = False  # the server refused the previous round's state: its questions are asked anew

    @classmethod
    def of(
        cls,
        result: types.InputRequiredResult,
        *,
        round: int,
        asked_again: bool = False,
        url_schemes: Collection[str] = URL_SCHEMES,
    ) -> InputRound:
        """The round ``result`` asks for. Raises :class:`FormUnsupported` for a request the bot can't serve
        (sampling, or a question it can't ask, :func:`question_for`)."""
        requests: dict[str, dict[str, Any]] = {}
        responses: dict[str, dict[str, Any]] = {}
        for key, request in (result.input_requests or {}).items():
            if isinstance(request, types.ElicitRequest):
                question_for(request.params, url_schemes=url_schemes)  # refused now, not halfway through
                requests[key] = request.params.model_dump(mode="json", by_alias=True, exclude_none=True)
            elif isinstance(request, types.ListRootsRequest):
                responses[key] = types.ListRootsResult(roots=[]).model_dump(mode="json", by_alias=True)
            else:
                raise FormUnsupported("it asks to use the client's model (sampling), which this bot does not offer")
        return cls(
            request_state=result.request_state,
            requests=requests,
            responses=responses,
            round=round,
            asked_again=asked_again,
        )

    @classmethod
    def stored(cls, payload: dict[str, Any] | None) -> InputRound | None:
        """The round stored in a suspend payload, or None (not suspended on one, or unreadable)."""
        raw = (payload or {}).get(INPUT_KEY)
        try:
            return cls.model_validate(raw) if isinstance(raw, dict) else None
        except ValidationError:
            return None

    def answered(self, answer: str | list[str] | None) -> InputRound:
        """This round with the answer to the question asked now recorded."""
        if self.asking is None:
            return self
        result = elicit_result(answer).model_dump(mode="json", by_alias=True, exclude_none=True)
        return self.model_copy(update={"responses": {**self.responses, self.asking: result}, "asking": None})

    def next_question(self, *, url_schemes: Collection[str] = URL_SCHEMES) -> dict[str, Any] | None:
        """The suspend payload asking the next unanswered request (this round stored in it), or None when every
        request has its answer. Raises :class:`FormUnsupported` (:func:`question_for`)."""
        key = next((k for k in self.requests if k not in self.responses), None)
        if key is None:
            return None
        params = _elicit_params(self.requests[key])
        stored = self.model_copy(update={"asking": key}).model_dump(mode="json")
        question = question_for(params, url_schemes=url_schemes)
        if self.asked_again:
            question["question"] = f"{ASKED_AGAIN}\n\n{question['question']}"
        return {**question, INPUT_KEY: stored}

    def input_responses(self) -> dict[str, types.InputResponse]:
        """The ``inputResponses`` to send with the call again (typed)."""
        out: dict[str, types.InputResponse] = {}
        for key, raw in self.responses.items():
            out[key] = types.ElicitResult.model_validate(raw) if key in self.requests else _roots(raw)
        return out


async def call_with_input(
    send: Send, ctx: ToolContext | None, *, what: str, url_schemes: Collection[str] = URL_SCHEMES
) -> types.CallToolResult:
    """Drive one ``tools/call`` on the newer protocol generation to its result: ``send(responses, state)`` sends it;
    an ``input_required`` answer suspends the run with its first question (``ctx.suspend``), and the call that
    resumes with the answer (``ctx.resume_data``, the round in ``ctx.suspend_payload``) asks the next one or sends
    the call again with every answer. A round the server no longer accepts is asked again from the start.
    ``what`` names the call in errors; ``url_schemes``: the links a person may be shown (:func:`question_for`).
    Raises ``ToolSuspended``, :class:`McpToolError`."""
    responses: dict[str, types.InputResponse] | None = None
    state: str | None = None
    rounds = 0
    stored = InputRound.stored(ctx.suspend_payload) if ctx is not None and ctx.resume_data is not None else None
    if stored is not None and ctx is not None:  # resumed with the answer to one of this call's questions
        done = stored.answered(ctx.resume_data)
        try:
            asking = done.next_question(url_schemes=url_schemes)
        except FormUnsupported as exc:  # the setting changed since the round was stored
            raise McpToolError(f"{what} asked for input the bot can't give: {exc}") from None
        if asking is not None:
            ctx.suspend(asking)
        responses, state, rounds = done.input_responses(), done.request_state, done.round
    again = False
    while True:
        try:
            result = await send(responses, state)
        except McpStateRefused:
            if again:
                raise
            responses, state, again = None, None, True  # start over: the server asks its questions anew
            continue
        if not isinstance(result, types.InputRequiredResult):
            return result
        rounds += 1
        if rounds > MAX_ROUNDS:
            raise McpToolError(f"{what} kept asking for input ({MAX_ROUNDS} rounds)")
        try:
            round_ = InputRound.of(result, round=rounds, asked_again=again, url_schemes=url_schemes)
            asking = round_.next_question(url_schemes=url_schemes)
        except FormUnsupported as exc:
            raise McpToolError(f"{what} asked for input the bot can't give: {exc}") from None
        if asking is not None:
            if ctx is None:
                raise McpToolError(f"{what} asks a person, which needs a conversation")
            ctx.suspend(asking)
        responses, state = round_.input_responses(), round_.request_state
        await asyncio.sleep(min(0.05 * 2 ** (rounds - 1), 0.25))  # state only: the server is still working


def _roots(raw: dict[str, Any]) -> types.ListRootsResult:
    return types.ListRootsResult.model_validate(raw)


def _elicit_params(raw: dict[str, Any]) -> types.ElicitRequestParams:
    if raw.get("mode") == "url":
        return types.ElicitRequestURLParams.model_validate(raw)
    return types.ElicitRequestFormParams.model_validate(raw)


def _payload(question: str, labels: list[str] | None, mode: str | None, form: Form) -> dict[str, Any]:
    if len(question) > MAX_QUESTION:  # an outside party's text, kept with the run: bot.agent.text
        raise FormUnsupported(f"its message has {len(question)} characters; at most {MAX_QUESTION} can be asked")
    if labels is not None and len(labels) > MAX_CHOICES:
        raise FormUnsupported(f"it offers {len(labels)} choices; at most {MAX_CHOICES} can be shown")
    try:
        payload = AskUserPayload.model_validate(
            {
                "question": question,
                "options": [AskUserOption(label=label).model_dump() for label in labels] if labels else None,
                "selection_mode": mode,
                "form": form.model_dump(),
            }
        )
    except ValidationError as exc:
        problems = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        raise FormUnsupported(problems) from None
    return payload.model_dump(mode="json", exclude_none=True)


def validate_answer(resume_data: Any, suspend_payload: dict[str, Any]) -> str:
    """The resume validator of MCP tools: an answer to a server's question must be a reply to its form
    (:meth:`bot.agent.forms.Form.validate_reply`); returns it normalized. Raises ``AnswerError``."""
    form = AskUserPayload.model_validate(suspend_payload).form
    if form is None:
        raise AnswerError("this tool is not waiting for an answer to a form")
    return form.validate_reply(resume_data)
