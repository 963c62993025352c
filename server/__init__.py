"""hermes-server's HTTP side: the OpenAI-compatible facade and the upstream simulator."""
