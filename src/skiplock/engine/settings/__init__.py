"""Engine settings: the fields, their environment variables, ``Settings``."""
