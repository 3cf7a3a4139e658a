"""The fault suite: ``python -m benchmarks.faults`` (``--quick``, ``--scenario NAME``).

Each scenario runs worker processes and a steady producer on a throw-away PostgreSQL
server (:mod:`benchmarks.pgcluster`), causes its fault, and checks a ledger of every job
(:mod:`benchmarks.faults.ledger`): nothing lost, nothing stuck, no effect of a
transactional processor done twice, every re-run explained by a fault. docs/reliability.md
states the guarantee and shows the figures.
"""
