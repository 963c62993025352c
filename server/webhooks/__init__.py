"""Webhooks: events about runs and background responses, signed the Standard Webhooks way and
delivered at least once to the configured endpoints and to the ones a request names."""
