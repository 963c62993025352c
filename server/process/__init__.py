"""The serving process itself: its runtime settings, ``--workers``, reload on SIGHUP and the
drain on SIGTERM."""
