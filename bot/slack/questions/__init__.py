"""A question in Slack: find the one a request names, who may answer, claim it, close its messages, its deadline."""
