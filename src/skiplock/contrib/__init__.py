"""Integrations with optional libraries, each behind its extra (R7).

- :mod:`skiplock.contrib.prometheus`: a Prometheus ``Metrics`` (``skiplock[prometheus]``).
- :mod:`skiplock.contrib.otel`: an OpenTelemetry ``Tracer`` (``skiplock[otel]``, API only).
- :mod:`skiplock.contrib.logging`: the running job's fields on log records, JSON lines
  (standard library only).

Importing this package imports none of them; core, ports and engine never do.
"""

from __future__ import annotations
