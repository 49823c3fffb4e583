"""People acting on what the app posted: clicking, ticking and choosing in messages, submitting and closing modals,
as Slack's clients do; each a signed interaction payload to the app (docs.slack.dev
reference/interaction-payloads/block_actions-payload, view-interactions-payload). ``Interactions`` is the base of
``Workspace``, whose docstring lists these calls; it needs ``clock``, ``fake``, ``sender`` and ``view_errors``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from bot.fakeslack import blockkit
from bot.fakeslack.elements import initial_state, iter_elements
from bot.fakeslack.fake_slack import FakeSlack
from bot.fakeslack.inputs import check_submittable, choose, element_of, entry_for, labels_of, options_of, text_of, tick
from bot.fakeslack.sender import Ack, Sender, block_actions_payload, view_submission_payload
from bot.fakeslack.socket_mode import SocketSender
from bot.fakeslack.state import APP_ID, BOT_USER_ID, JSON, TEAM_ID, Clock, PlaygroundError, SlackState, make_view
from bot.fakeslack.webapi.views import replace_view


class Interactions:
    """Clicks, ticks, selections and modal submissions by the workspace's people (see the module docstring)."""

    clock: Clock
    fake: FakeSlack
    sender: Sender | SocketSender
    view_errors: dict[str, JSON]

    @property
    def state(self) -> SlackState:
        return self.fake.state

    def _check_user(self, user: str) -> None:
        if user not in self.state.directory.users or user == BOT_USER_ID:
            raise PlaygroundError(f"no person {user!r} in the workspace")

    # -- interactions with messages ---------------------------------------------------------------

    async def click(self, message: JSON, label: str, *, user: str, as_seen: bool = False) -> Ack:
        """Click the button whose visible text is ``label``; failing that, pick the option ``label`` of a
        select / radio group / overflow menu (checkbox options are toggled).

        ``as_seen=True`` clicks ``message`` as given, like a client still showing that copy after the
        message was updated (two people clicking at once, a double click): Slack delivers such clicks.
        """
        channel, current, is_ephemeral = self._current(message)
        if as_seen:
            current = {k: v for k, v in message.items() if k not in ("channel", "is_ephemeral", "recipient")}
        for block, element in iter_elements(current.get("blocks", [])):
            if element.get("type") == "button" and text_of(element.get("text")) == label:
                action = {
                    "type": "button",
                    "action_id": element.get("action_id"),
                    "block_id": block.get("block_id"),
                    "text": element.get("text"),
                }
                for key in ("value", "style", "url"):
                    if key in element:
                        action[key] = element[key]
                return await self._send_block_action(channel, current, is_ephemeral, action, user=user)
        for _block, element in iter_elements(current.get("blocks", [])):
            if any(text_of(o.get("text")) == label for o in options_of(element)):
                if element.get("type") == "checkboxes":
                    return await self.toggle(message, label, user=user)
                return await self.select(message, [label], user=user)
        raise PlaygroundError(f"no button or option {label!r}; the message offers {labels_of(current)}")

    async def toggle(self, message: JSON, label: str, *, user: str) -> Ack:
        """Tick (or untick) the checkbox ``label``: one block_actions with the group's new selection."""
        channel, current, is_ephemeral = self._current(message)
        action = tick(current.get("blocks", []), label, self._values(channel, current, user))
        if action is None:
            raise PlaygroundError(f"no checkbox {label!r}; the message offers {labels_of(current)}")
        return await self._send_block_action(channel, current, is_ephemeral, action, user=user)

    async def select(self, message: JSON, labels: str | list[str], *, user: str) -> Ack:
        """Choose ``labels`` in the static_select / multi_static_select / radio group / overflow that has them
        (a single-choice element takes exactly one label)."""
        channel, current, is_ephemeral = self._current(message)
        action = choose(current.get("blocks", []), labels, self._values(channel, current, user))
        if action is None:
            wanted = [labels] if isinstance(labels, str) else list(labels)
            raise PlaygroundError(f"no select offering {wanted}; the message offers {labels_of(current)}")
        return await self._send_block_action(channel, current, is_ephemeral, action, user=user)

    def _current(self, message: JSON) -> tuple[str, JSON, bool]:
        """The message as stored now: ``(channel, message, is_ephemeral)``."""
        channel = message.get("channel")
        if not channel:
            raise PlaygroundError("pass a message returned by the Workspace (it carries its channel)")
        if message.get("is_ephemeral"):
            for eph in self.state.conversations[channel].ephemerals:
                if eph.message["ts"] == message["ts"] and eph.user == message.get("recipient"):
                    return channel, eph.message, True
            raise PlaygroundError(f"ephemeral {message['ts']} is gone")
        current = self.state.message(channel, message["ts"])
        if current is None:
            raise PlaygroundError(f"message {message['ts']} in {channel} was deleted")
        return channel, current, False

    def _values(self, channel: str, message: JSON, user: str) -> dict[str, dict[str, JSON]]:
        return self.state.interaction_values(channel, message["ts"], user, message.get("blocks", []))

    async def _send_block_action(
        self, channel: str, message: JSON, is_ephemeral: bool, action: JSON, *, user: str
    ) -> Ack:
        self._check_user(user)
        action["action_ts"] = f"{self.clock():.6f}"
        response_url = self.fake.mint_response_url(
            channel=channel,
            user=user,
            message_ts=message["ts"],
            thread_ts=message.get("thread_ts"),
            is_ephemeral=is_ephemeral,
        )
        payload = block_actions_payload(
            directory=self.state.directory,
            user=user,
            channel=channel,
            message=copy.deepcopy(message),
            is_ephemeral=is_ephemeral,
            actions=[action],
            state_values=copy.deepcopy(self._values(channel, message, user)),
            trigger_id=self.state.mint_trigger(user),
            response_url=response_url,
        )
        return await self.sender.send_interaction(payload)

    # -- modals -----------------------------------------------------------------------------------

    async def submit_view(self, view: JSON, values: Mapping[str, Any] | None = None, *, user: str) -> Ack:
        """Submit the open modal ``view`` with ``values`` keyed by input label or block_id:
        ``{"Your answer": "text"}`` or ``{"block_id": {"action_id": "text"}}``. A text input takes a str, a
        single select/radio a label, a multi select/checkboxes a list of labels. Applies the ack as Slack
        does: close (empty ack), ``errors`` (kept in ``view_errors``, modal stays), ``update``, ``push``,
        ``clear``. Raises ``PlaygroundError`` when Slack's client would refuse to submit (required input
        empty, text outside min/max length)."""
        current = self.state.views.get(str(view.get("id")))
        if current is None or current.id not in self.state.user_stack(user):
            raise PlaygroundError(f"view {view.get('id')} is not open for {user}")
        blocks = current.data["blocks"]
        state = initial_state(blocks)
        for key, raw in (values or {}).items():
            self._fill_value(blocks, state, key, raw)
        check_submittable(blocks, state)
        payload = view_submission_payload(
            directory=self.state.directory,
            user=user,
            view=copy.deepcopy(current.data),
            state_values=state,
            trigger_id=self.state.mint_trigger(user),
        )
        ack = await self.sender.send_interaction(payload)
        if ack.ok:
            self._apply_submission_ack(user, current.id, ack.json if isinstance(ack.json, dict) else {})
        return ack

    async def close_view(self, view: JSON, *, user: str) -> Ack | None:
        """The user closes the modal; the app gets ``view_closed`` only if the view set notify_on_close."""
        current = self.state.views.get(str(view.get("id")))
        if current is None:
            raise PlaygroundError(f"no view {view.get('id')}")
        ack = None
        if current.data.get("notify_on_close"):
            payload = {
                "type": "view_closed",
                "team": {"id": TEAM_ID, "domain": "playground"},
                "user": {"id": user, "name": self.state.directory.user_name(user), "team_id": TEAM_ID},
                "api_app_id": APP_ID,
                "view": copy.deepcopy(current.data),
                "is_cleared": False,
                "is_enterprise_install": False,
                "enterprise": None,
            }
            ack = await self.sender.send_interaction(payload)
        self.state.close_views(user, everything=bool(current.data.get("clear_on_close")), view_id=current.id)
        return ack

    def _fill_value(self, blocks: list[JSON], state: dict[str, dict[str, JSON]], key: str, raw: Any) -> None:
        by_id = {str(b.get("block_id")): b for b in blocks}
        if key in by_id and isinstance(raw, Mapping):
            for action_id, value in raw.items():
                element = element_of(by_id[key], str(action_id))
                state[key][str(action_id)] = entry_for(element, value)
            return
        for block in blocks:
            if block.get("type") == "input" and text_of(block.get("label")) == key:
                element = block["element"]
                state.setdefault(str(block["block_id"]), {})[str(element["action_id"])] = entry_for(element, raw)
                return
        labels = [text_of(b.get("label")) for b in blocks if b.get("type") == "input"]
        raise PlaygroundError(f"no input {key!r} in the view; its inputs are {labels}")

    def _apply_submission_ack(self, user: str, view_id: str, body: JSON) -> None:
        action = body.get("response_action")
        if action == "errors":
            self.view_errors[view_id] = dict(body.get("errors") or {})
            return
        self.view_errors.pop(view_id, None)
        if action == "update" and isinstance(body.get("view"), dict):
            if not blockkit.validate_view(body["view"]):
                replace_view(self.state, view_id, body["view"])
        elif action == "push" and isinstance(body.get("view"), dict):
            if not blockkit.validate_view(body["view"]):
                stack = self.state.user_stack(user)
                pushed = make_view(body["view"], user=user, root_view_id=stack[0], previous_view_id=stack[-1])
                self.state.views[pushed.id] = pushed
                stack.append(pushed.id)
                self.state.changed({"type": "view_pushed", "user": user, "view": copy.deepcopy(pushed.data)})
        elif action == "clear":
            self.state.close_views(user, everything=True)
        else:
            self.state.close_views(user, view_id=view_id)
