"""Retention: what is deleted once it is older than the configuration allows (the sweeper,
on one replica at a time), a conversation deleted on request with its workspace, and an end
user's data erased (docs/retention.md)."""
