"""How requests reach the bot and calls reach Slack: the lazy-listener runner and its work queue jobs, HTTP, Socket
Mode, the Web API (the listeners that route requests to the concepts stand beside the app: bot.slack.listeners)."""
