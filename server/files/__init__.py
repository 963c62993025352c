"""Files: what clients upload (``/v1/files``), the links and ids files leave the server under,
the conversations' workspaces, and a document given to the model itself."""
