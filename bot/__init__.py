"""Human-in-the-loop Slack frontend for AI agents.

Packages: ``bot.agent`` (Slack-agnostic runtime), ``bot.store`` (Redis run store),
``bot.slack`` (Bolt app), ``bot.fakeslack`` (a local fake Slack), ``bot.playground`` (the demo app on it).
docs/architecture.md ("Where things are") maps the modules.
"""
