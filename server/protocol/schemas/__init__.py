"""The shapes of what the server answers, as pydantic models for the OpenAPI document.

The views build their answers as plain dicts (``server/views/``); these models only describe
them. A route whose handler returns one of these shapes as a plain dict names it as its
``response_model`` (FastAPI then checks the dict against it); every other route lists it in
``responses=`` for the document alone. Objects that may carry more keys than listed allow them.
A field typed ``Omittable[X]`` is a key that may be missing, never ``null``.
"""
