"""Chat sessions: stored transcripts and how a client's history relates to them."""
