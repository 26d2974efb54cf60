"""Watch mode: runs started by files dropped into inboxes."""
