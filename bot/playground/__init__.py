"""A local Slack workspace: a fake Web API, a signed event/interaction sender and a test-facing API.

Modules: ``blockkit`` (Block Kit validation as Slack does it), ``state`` (the fake workspace's data),
``webapi`` (the Web API methods), ``fake_slack`` (the HTTP server: ``FakeSlack``), ``sender`` (signed
requests to the app: ``Sender``), ``socket_mode`` (the same over Socket Mode: ``SocketModeHub``,
``SocketSender``), ``workspace`` (``Workspace``: people acting in the fake workspace).
"""

from bot.playground.fake_slack import ApiCall, FakeSlack
from bot.playground.sender import Ack, Sender
from bot.playground.state import ManualClock, PlaygroundError
from bot.playground.workspace import Delivery, Workspace

__all__ = ["Ack", "ApiCall", "Delivery", "FakeSlack", "ManualClock", "PlaygroundError", "Sender", "Workspace"]
