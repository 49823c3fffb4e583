"""The fake's Slack Web API, by Slack's method families (docs.slack.dev reference/methods): :mod:`.core` (the method
table, what the families share, ``auth.test``), :mod:`.args` (arguments and Slack's errors), :mod:`.chat`,
:mod:`.streams` (chat.startStream / appendStream / stopStream), :mod:`.views`, :mod:`.reactions`,
:mod:`.conversations`, :mod:`.people` (users, user groups), :mod:`.assistant` (assistant.threads.*) and
:mod:`.agent_sessions` (agents.sessions.*). ``apps.connections.open`` (Socket Mode) needs the server's address, so
:mod:`bot.fakeslack.fake_slack` serves it."""
