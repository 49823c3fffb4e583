"""A local Slack workspace: a fake Web API, a signed event/interaction sender and a test-facing API.

Modules: ``blockkit`` (Block Kit validation as Slack does it), ``state`` (the fake workspace's data) and
``elements`` (its Block Kit elements), ``webapi`` (the Web API methods; ``api_args`` their errors and argument
checks; ``streams`` chat.startStream/appendStream/stopStream; ``assistant`` assistant.threads.*), ``fake_slack``
(the HTTP server: ``FakeSlack``), ``sender`` (signed requests to the app: ``Sender``), ``socket_mode`` (the same
over Socket Mode: ``SocketModeHub``, ``SocketSender``), ``workspace`` (``Workspace``: people acting in the fake
workspace; ``interactions`` and ``inputs`` their clicks and submissions, ``assistant_pane`` Slack's AI split view,
``home_tab`` the App Home), ``ui`` / ``ui_events`` / ``ui_snapshot`` / ``static`` (the browser playground).
"""

from bot.playground.fake_slack import ApiCall, FakeSlack
from bot.playground.sender import Ack, Sender
from bot.playground.state import ManualClock, PlaygroundError
from bot.playground.workspace import Delivery, Workspace

__all__ = ["Ack", "ApiCall", "Delivery", "FakeSlack", "ManualClock", "PlaygroundError", "Sender", "Workspace"]
