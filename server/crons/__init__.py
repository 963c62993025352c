"""Schedules (``/v1/crons``): cron expressions read in a time zone, and the scheduler each
replica runs, which fires every due schedule once across replicas as a ``POST /v1/runs``
run."""
