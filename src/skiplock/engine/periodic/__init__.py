"""Periodic schedules: the pure schedule rules and the scheduler that enqueues
their ticks."""
