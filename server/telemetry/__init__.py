"""Observability beyond the metrics: OpenTelemetry traces and structured logs.

- :mod:`.tracing` decides whether traces are on (the standard ``OTEL_*`` variables) and, only
  then, imports the SDK (:mod:`.otel_setup`) and adds the span view (:mod:`.spans`) to the run
  manager's observers. Off, nothing of the SDK is imported and no run pays anything per event.
- :mod:`.run_context` is what a log line knows of the run it is about (a context variable set
  where a run begins); :mod:`.json_logs` writes lines as JSON and keeps secrets out of them.
"""
