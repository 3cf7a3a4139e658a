"""The AA_JOB system of docs/requirements.md (J1-J13) as one small application.

A FastAPI app (``app``), a worker entry point (``worker``), its own tables (``schema``)
and the spec's job kinds with their policies (``jobs``, ``indexes``), built only on
skiplock's public API. ``controls`` holds pause/resume and run-time per-tenant limits.
The tutorial is README.md beside this file.
"""
