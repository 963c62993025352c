"""Budgets: what a key and each end user behind it may spend, held before a run starts and
between its model calls (docs/budgets.md)."""
