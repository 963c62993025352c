"""Replicas of one deployment: each process's instance name, and what they share through Redis
(stop requests and cooldowns, run reservations, the event log, liveness) so any of them can
serve any run. ``cluster.Cluster`` is a replica's link to the others."""
