"""Alembic migrations of the store (applied by ``Database.upgrade``)."""
