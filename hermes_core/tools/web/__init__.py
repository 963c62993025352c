"""The web toolset: search (``search.py``), fetch (``fetch.py``), both held to the address
policy of ``guard.py``; ``tools.py`` makes them tools."""
