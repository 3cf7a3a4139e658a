"""``python -m examples.aa_jobs``: create the tables and serve the app with a worker inside.

``AA_DSN`` (default: the local server's ``postgres`` database), ``AA_TOKEN`` (default
``dev-token``) and ``AA_OPERATOR`` (default ``operator``, the audit trail's actor) configure it.
"""

from __future__ import annotations

import argparse
import logging
import os

import uvicorn

from skiplock import Settings

from .app import create_app
from .jobs import build, make_settings
from .schema import setup


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m examples.aa_jobs")
    parser.add_argument(
        "--dsn", default=os.environ.get("AA_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
    )
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--no-worker", action="store_true", help="enqueue only; run workers apart")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    setup(args.dsn)
    tokens = {os.environ.get("AA_TOKEN", "dev-token"): os.environ.get("AA_OPERATOR", "operator")}
    app = create_app(
        build(args.dsn, Settings.from_env(base=make_settings())),
        tokens=tokens,
        embedded_worker=not args.no_worker,
    )
    uvicorn.run(app, host="127.0.0.1", port=args.port, lifespan="on")


if __name__ == "__main__":
    main()
