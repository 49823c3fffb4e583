"""The Slack frontend: Bolt ``AsyncApp`` listeners (:mod:`bot.slack.frontend`), Block Kit rendering
(:mod:`bot.slack.blocks`), payload references (:mod:`bot.slack.refs`) and assembly (:mod:`bot.slack.app`)."""
