-- 0013: the jobs triggers also notify for jobs that are due later, so a listening worker
-- arms its next-due timer for them (docs/worker-internals.md, "The worker"): a job enqueued
-- for later, a retry after its backoff, a release with a delay. The payload is still the
-- kind; a notified worker claims, and when nothing is due asks the bounded next_due
-- query when the next job of its kinds and tenants falls due.
-- Placeholders: {schema} (quoted schema name), {channel} (quoted channel literal text).

CREATE OR REPLACE FUNCTION {schema}.notify_jobs() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    job_kind text;
BEGIN
    FOR job_kind IN
        SELECT DISTINCT n.kind FROM new_rows AS n WHERE n.status = 'pending'
    LOOP
        PERFORM pg_notify(TG_ARGV[0], job_kind);
    END LOOP;
    RETURN NULL;
END
$$;

-- Still nothing for claims and completions (the hot path): only rows that became pending
-- or whose pending due time moved.
DROP TRIGGER jobs_notify_update ON {schema}.jobs;

CREATE TRIGGER jobs_notify_update
    AFTER UPDATE ON {schema}.jobs
    FOR EACH ROW
    WHEN (
        NEW.status = 'pending'
        AND (OLD.status <> 'pending' OR OLD.available_at <> NEW.available_at)
    )
    EXECUTE FUNCTION {schema}.notify_job('{channel}');
