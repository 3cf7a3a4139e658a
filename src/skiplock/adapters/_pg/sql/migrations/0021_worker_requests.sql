-- 0021: workers with controls (issue 45, docs/workers.md "Drain or stop a worker"): a
-- worker registers its slots and skiplock version, and an operator's request to drain
-- or stop it is a column of its row, which every worker reads with the run-time controls
-- (so it reaches a worker on any host). All nullable: a worker of the previous release
-- registers without them and ignores a request.
-- Placeholders: {schema} (quoted schema name).

ALTER TABLE {schema}.workers
    ADD COLUMN slots integer,
    ADD COLUMN version text,
    ADD COLUMN request text CHECK (request IN ('drain', 'stop')),
    ADD COLUMN requested_by text,
    ADD COLUMN requested_at timestamptz;
