"""What Slack shows: Block Kit messages and modals, mrkdwn, text made safe (whole or streamed), approval requests."""
