"""A local Slack workspace for tests and the playground: a fake Web API over HTTP, signed events and interactions,
Socket Mode, and people acting in it (``Workspace``)."""

from bot.fakeslack.fake_slack import ApiCall, FakeSlack
from bot.fakeslack.sender import Ack, Sender
from bot.fakeslack.state import ManualClock, PlaygroundError
from bot.fakeslack.workspace import Delivery, Workspace

__all__ = ["Ack", "ApiCall", "Delivery", "FakeSlack", "ManualClock", "PlaygroundError", "Sender", "Workspace"]
