"""MCP servers' tools in the agent: ``connection.py`` keeps one server connected (the official
``mcp`` SDK, stdio or streamable HTTP); ``toolset.py`` turns a profile's servers into tools."""
