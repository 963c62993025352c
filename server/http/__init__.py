"""The HTTP edge around the routes: keys, limits, the hot path, SSE framing, the OpenAPI
document, and serving an app on a background thread (tests, the simulator)."""
