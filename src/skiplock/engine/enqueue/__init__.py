"""Enqueueing: the intake that turns calls into store requests, the enqueue and
schedule operations of an engine, and typed task handles."""
