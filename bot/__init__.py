"""Human-in-the-loop Slack frontend for AI agents.

Packages: ``bot.agent`` (Slack-agnostic runtime), ``bot.store`` (Redis run store),
``bot.slack`` (Bolt app), ``bot.playground`` (a local fake Slack).
docs/architecture.md ("Where things are") maps the modules.
"""
