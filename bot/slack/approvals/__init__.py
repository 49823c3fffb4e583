"""A tool call's approval in Slack: Approve, Decline and Details, the decision taken exactly once."""
