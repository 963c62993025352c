"""A key's own skills as the server keeps them: in the SQL store (shared by the replicas),
materialised on this host's disk when a run opens one (:mod:`server.skills.library`)."""
