"""Replicas of one deployment: each process's instance name, and what they share through Redis
(liveness, stop requests, the event log) so any of them can serve any run."""
