"""The usage ledger's writer: every run's model calls, added to the day's rows when it ends
(docs/usage.md)."""
