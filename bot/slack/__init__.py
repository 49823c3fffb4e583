"""The Slack layer: Bolt listeners (:mod:`bot.slack.listeners`) and their runner (:mod:`bot.slack.runner`),
answering (:mod:`bot.slack.answering`), conversations in threads (:mod:`bot.slack.threads`), following a run into
Slack (:mod:`bot.slack.follow`), Web API calls (:mod:`bot.slack.webapi`), Block Kit (:mod:`bot.slack.blocks`,
:mod:`bot.slack.modals`); assembled by :mod:`bot.slack.app`."""
