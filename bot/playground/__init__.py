"""The playground: the demo app in a browser over the fake Slack (:mod:`bot.fakeslack`), with a demo model and agent."""
