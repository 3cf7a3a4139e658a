"""Migrations of the ``skiplock`` app: ``0001_initial`` installs skiplock's schema (see
``_schema``); skiplock's later schema versions are applied by ``migrate`` without new
files here."""
