"""The OpenAI Chat Completions adapter of the model port (:class:`bot.agent.model.ChatModel`).

:class:`OpenAIChatModel` talks to any OpenAI-compatible server through ``AsyncOpenAI``, which reads
``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` itself. Shapes it accepts beside OpenAI's own:

- tool-call entries with repeated, missing or reused ``index`` / ``id`` / ``name``, and ``arguments`` sent as a
  JSON object (:class:`bot.agent.model.assembler.ToolCallAssembler`);
- a plain ``application/json`` ``chat.completion`` body in answer to a stream request (the server ignored
  ``stream: true``); with ``stream=False`` the model never asks for a stream;
- provider fields beside the standard ones, kept so they can be sent back: on the message
  (``reasoning_content``, ``reasoning``, ``reasoning_details``, ...) in :attr:`TurnDone.extra`, on a tool call
  (``extra_content``, ...) in ``ToolCall.extra``.

The server's ``usage.prompt_tokens`` is passed on (:attr:`TurnDone.prompt_tokens`): a stream request asks for it
with ``stream_options: {"include_usage": true}`` (a last chunk without choices carries it); a server that refuses
that option (HTTP 400 or 422 naming it) is asked again without it, and never again by this model object. A refusal as
longer than the model's context window (``context_length_exceeded``, or a 400 saying so) raises
:class:`bot.errors.ContextTooLong` with the numbers the server stated.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import aiohttp
import openai
from openai import AsyncOpenAI, AsyncStream

from bot.agent._loop.budget import error_numbers
from bot.agent.model import ModelEvent, TextDelta, TurnDone
from bot.agent.model.assembler import ToolCallAssembler, merge_extra
from bot.agent.text import without_surrogates
from bot.errors import ContextTooLong, ModelCallFailed

MESSAGE_FIELDS = frozenset(
    {"role", "content", "refusal", "tool_calls", "function_call", "audio", "annotations", "name"}
)
"""The keys Chat Completions defines for an assistant message; any other key is a provider extra."""

_ERROR_CODE = re.compile(r"[\w.:-]{1,64}")
_CONTEXT_WORDS = re.compile(
    r"context[ _-]?(length|window)|maximum context|too many tokens|prompt is too long|reduce the length", re.I
)


def context_error(code: object, text: str, *, status: int | None = None) -> ContextTooLong | None:
    """A :class:`ContextTooLong` when an error (its ``code``, its text, its HTTP ``status``) says the request is
    longer than the model's context window, else None. Only the numbers of the text are kept."""
    if code == "context_length_exceeded" or (status in (None, 400, 413) and _CONTEXT_WORDS.search(text)):
        limit, used = error_numbers(text)
        return ContextTooLong(limit=limit, prompt_tokens=used)
    return None


class _Turn:
    """Accumulates one assistant turn from streamed chunks or from a whole message."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.assembler = ToolCallAssembler()
        self.finish_reason: str | None = None
        self.extra: dict[str, Any] = {}
        self.prompt_tokens: int | None = None

    def add_chunk(self, chunk: Any) -> Iterator[str]:
        """Take one streamed ``chat.completion.chunk`` as its JSON object (any shape: what is not a mapping or a
        list where one is expected is skipped); yields its text pieces."""
        if not isinstance(chunk, Mapping):
            return
        self._usage(chunk.get("usage"))
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, Mapping):
                continue
            delta = choice.get("delta")
            if isinstance(delta, Mapping):
                content = delta.get("content")
                if isinstance(content, str) and content:
                    content = without_surrogates(content)
                    self.text.append(content)
                    yield content
                calls = delta.get("tool_calls")
                if isinstance(calls, list) and calls:
                    self.assembler.feed(c for c in calls if isinstance(c, Mapping))
                if len(delta.keys() - MESSAGE_FIELDS):
                    merge_extra(self.extra, {k: v for k, v in delta.items() if k not in MESSAGE_FIELDS})
            finish = choice.get("finish_reason")
            if isinstance(finish, str) and finish:
                self.finish_reason = finish

    def add_body(self, body: Any) -> str:
        """Take a whole ``chat.completion`` JSON body; returns its text. Raises ``ModelCallFailed``."""
        if not isinstance(body, Mapping):
            raise ModelCallFailed("model server sent an unexpected reply (not a JSON object)")
        error = body.get("error")
        if error:
            code = (error.get("code") or error.get("type")) if isinstance(error, Mapping) else None
            text = error.get("message") if isinstance(error, Mapping) else None
            too_long = context_error(code, text if isinstance(text, str) else "")
            if too_long is not None:
                raise too_long
            shown = f" ({code})" if isinstance(code, str) and _ERROR_CODE.fullmatch(code) else ""
            raise ModelCallFailed(f"model request failed: the model server answered with an error{shown}")
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            raise ModelCallFailed("model server sent a reply without choices")
        choice = choices[0]
        # "delta": a server that answered a stream request with one whole chunk object.
        message = choice.get("message") or choice.get("delta") or {}
        if not isinstance(message, Mapping):
            raise ModelCallFailed("model server sent a reply whose message is not an object")
        text = without_surrogates(_text_of(message.get("content")))
        if text:
            self.text.append(text)
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            self.assembler.feed({**c, "index": i} for i, c in enumerate(calls) if isinstance(c, Mapping))
        merge_extra(self.extra, {k: v for k, v in message.items() if k not in MESSAGE_FIELDS})
        finish = choice.get("finish_reason")
        self.finish_reason = finish if isinstance(finish, str) else None
        self._usage(body.get("usage"))
        return text

    def _usage(self, usage: Any) -> None:
        tokens = usage.get("prompt_tokens") if isinstance(usage, Mapping) else getattr(usage, "prompt_tokens", None)
        if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0:
            self.prompt_tokens = tokens

    def done(self) -> TurnDone:
        return TurnDone(
            content="".join(self.text),
            tool_calls=self.assembler.calls(),
            finish_reason=self.finish_reason,
            extra=self.extra,
            prompt_tokens=self.prompt_tokens,
        )


def _text_of(content: Any) -> str:
    """A message's ``content``: a string, ``None``, or a list of parts (``{"type": "text", "text": ...}``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p["text"]
            for p in content
            if isinstance(p, Mapping) and p.get("type") == "text" and isinstance(p.get("text"), str)
        )
    return ""


def _transport_error(exc: BaseException) -> bool:
    """Whether ``exc`` is an HTTP library's own transport error (httpx, httpcore, their 2.x forks, aiohttp)."""
    return type(exc).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore", "httpcore2", "aiohttp")


def _refused(exc: BaseException) -> bool:
    """Whether ``exc`` was caused by a connection that could not be made (refused, unreachable, name unknown):
    aiohttp's ``ClientConnectorError`` or an ``OSError`` somewhere in its cause chain."""
    seen: BaseException | None = exc
    for _ in range(10):
        seen = seen.__cause__ or seen.__context__ if seen is not None else None
        if seen is None:
            return False
        if isinstance(seen, aiohttp.ClientConnectorError | ConnectionRefusedError):
            return True
    return False


def aiohttp_http_client() -> Any:
    """The openai client's aiohttp transport (``openai.DefaultAioHttpClient``: the SDK's defaults, over aiohttp's
    connection pool instead of httpx's, which checks every pooled connection on each request: ~1.7 ms less CPU per
    model turn with 100 calls in flight, ``benchmarks.ack_latency``), or ``None`` (the SDK's default client) where
    this openai version lacks it or its aiohttp extra."""
    try:
        from openai import DefaultAioHttpClient  # type: ignore[attr-defined,unused-ignore]  # openai < 1.8x
    except ImportError:
        return None
    try:
        return DefaultAioHttpClient()
    except RuntimeError:  # "you must have installed the package with the `aiohttp` extra"
        return None


class OpenAIChatModel:
    """Chat Completions over ``AsyncOpenAI``; implements :class:`bot.agent.model.ChatModel`.

    ``client`` defaults to ``AsyncOpenAI()`` (reads ``OPENAI_API_KEY``/``OPENAI_BASE_URL``); ``base_url``
    and ``api_key`` override them. ``timeout`` is seconds per request; ``max_retries`` is the client's own
    retry count for connection errors, 408/409/429 and 5xx. ``stream=False`` asks for a whole
    ``chat.completion`` instead of a stream (for servers that cannot stream with tools); the text then arrives
    as one :class:`TextDelta`. With ``stream=True`` a server that answers with a plain JSON body anyway is
    handled the same way.
    """

    def __init__(
        self,
        model: str,
        *,
        client: AsyncOpenAI | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        temperature: float | None = None,
        stream: bool = True,
    ) -> None:
        self.model = model
        self.temperature = temperature
        self.stream = stream
        self.usage_in_stream = True  # ask for usage in streams (off once a server refused stream_options)
        self._owns_client = client is None
        self._client = client or AsyncOpenAI(
            base_url=base_url,
            api_key=api_key,
            timeout=timeout,
            max_retries=max_retries,
            http_client=aiohttp_http_client(),
        )

    async def aclose(self) -> None:
        """Close the HTTP client this model created (a client passed in is the caller's to close)."""
        if self._owns_client:
            await self._client.close()

    async def stream_turn(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]]
    ) -> AsyncIterator[ModelEvent]:
        """One assistant turn; see :class:`bot.agent.model.ChatModel`.

        Raises ``ModelCallFailed`` for an HTTP error status (after the client's retries), a timeout, a
        connection failure, an error object in the reply (a JSON body or a stream event), or a reply that is
        not a Chat Completions response. Messages name no key or server text.
        """
        # The messages and tool specs are plain JSON already: sent as the body's own fields (``extra_body``, merged
        # into the JSON body as they are; the SDK documents that its keys win), they skip the SDK's type-directed
        # transform of every message and schema (~1 ms of CPU per turn with a short history; ~0.2 ms a message, so
        # 1,000 messages ~200 ms, measured by benchmarks/history.py), for an identical request body. ``messages=[]``
        # only satisfies the signature.
        fields: dict[str, Any] = {"messages": messages}
        kwargs: dict[str, Any] = {"model": self.model, "messages": [], "extra_body": fields}
        if self.stream:
            kwargs["stream"] = True
            if self.usage_in_stream:
                kwargs["stream_options"] = {"include_usage": True}
        if tools:
            fields["tools"] = tools
        if self.temperature is not None:
            fields["temperature"] = self.temperature
        turn = _Turn()
        answered = False  # the server answered: a connection error from here on broke its reply off
        try:
            raw = await self._create(kwargs)
            answered = True
            content_type = raw.headers.get("content-type", "").lower()
            if self.stream and "json" not in content_type:
                # Chunks as plain JSON objects: the SDK's own chunk models cost ~0.8 ms of CPU per turn to build.
                stream = raw.parse(to=AsyncStream[dict[str, Any]])
                try:
                    async for chunk in stream:
                        for text in turn.add_chunk(chunk):
                            yield TextDelta(text)
                except json.JSONDecodeError:  # the SDK decodes each ``data:`` line; a broken one is the server's
                    raise ModelCallFailed("model server sent a stream chunk that is not valid JSON") from None
                finally:
                    await stream.close()
                if turn.finish_reason is None:  # cut off: no finish_reason, so no telling what is missing
                    raise ModelCallFailed("the model's stream ended before the turn was finished")
            else:
                try:
                    data = await raw.http_response.aread()
                except Exception as exc:  # the body is read outside the SDK's error mapping
                    raise ModelCallFailed(f"model request failed: reply not read ({type(exc).__name__})") from None
                try:
                    body = json.loads(data)
                except ValueError:
                    raise ModelCallFailed("model server sent a reply that is not valid JSON") from None
                text = turn.add_body(body)
                if text:
                    yield TextDelta(text)
        except openai.APIStatusError as exc:
            too_long = context_error(exc.code, exc.message, status=exc.status_code)
            if too_long is not None:
                raise too_long from None
            raise ModelCallFailed(f"model request failed: HTTP {exc.status_code} from the model server") from None
        except openai.APITimeoutError as exc:
            if _refused(exc):  # the aiohttp transport reports a refused connection as a connect timeout
                raise ModelCallFailed("could not connect to the model server", kind="connection") from None
            raise ModelCallFailed("model request timed out", kind="timeout") from None
        except openai.APIConnectionError:
            if answered:
                raise ModelCallFailed(
                    "the connection to the model server broke during its reply", kind="connection"
                ) from None
            raise ModelCallFailed("could not connect to the model server", kind="connection") from None
        except openai.APIError as exc:  # e.g. an error event in the stream
            too_long = context_error(exc.code, exc.message)
            if too_long is not None:
                raise too_long from None
            raise ModelCallFailed(f"model request failed: {type(exc).__name__}") from None
        except openai.OpenAIError as exc:
            raise ModelCallFailed(f"model request failed: {type(exc).__name__}") from None
        except Exception as exc:
            if not _transport_error(exc):
                raise
            # older openai releases let the HTTP library's own errors out of a stream's iteration
            what = "broke during its reply" if answered else "could not be made"
            raise ModelCallFailed(f"the connection to the model server {what}", kind="connection") from None
        yield turn.done()

    async def _create(self, kwargs: dict[str, Any]) -> Any:
        """Send the request; a 400 or 422 naming ``stream_options`` (a server that does not know it) is sent again
        without it, and this model stops asking for usage in streams."""
        create = self._client.chat.completions.with_raw_response.create
        try:
            return await create(**kwargs)
        except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:  # 422: pydantic-validating servers
            said = f"{exc.message} {exc.body}"  # the SDK's message holds only error.message, not e.g. FastAPI's detail
            if "stream_options" not in kwargs or "stream_options" not in said:
                raise
            self.usage_in_stream = False
            return await create(**{k: v for k, v in kwargs.items() if k != "stream_options"})
