"""MCP servers' tools in the agent: ``connection.py`` keeps one server connected (the official
``mcp`` SDK, stdio or streamable HTTP); ``toolset.py`` turns a profile's servers into tools.
Only ``sdk.py`` imports the SDK, and a connection loads it on a worker thread before its first
connect, so a server with MCP servers starts, and answers /health, without waiting for it."""
