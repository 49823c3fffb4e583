"""The Slack layer, by concept: transport (how requests arrive and calls leave), render (Block Kit), replies (a run's
way into its thread), questions, approvals; assembled by :mod:`bot.slack.app`."""
