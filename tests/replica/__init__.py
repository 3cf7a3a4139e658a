"""Reads from a hot standby (issue 43): tests/pgstandby.py starts one."""
