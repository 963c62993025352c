"""Thin FastAPI routers; the work happens in services they call."""
