-- 0009: what a job's runs produced (X5): when it first started, the processor's return
-- value, and its failed attempts. Placeholders: {schema} (quoted schema name).
--
-- Nullable columns without a default: adding them rewrites nothing (instant on a large
-- table), and a job that never started, returned nothing or never failed costs no space
-- (a NULL is a bit in the row's null bitmap). Rows written before have no history (a
-- backfill would rewrite the whole hot table); one running across the upgrade gets its
-- current claim's time as started_at when its outcome is written.
--   started_at: the time of the first claim that ran the job.
--   result:     the processor's return value as JSON (succeeded jobs only).
--   errors:     a JSON array of the latest failed attempts, oldest first, each
--               {"attempt", "worker_id", "claimed_at", "failed_at", "error"}; appended
--               only when an attempt fails (recorded_errors below), bounded
--               (skiplock.core.MAX_RECORDED_ERRORS).
ALTER TABLE {schema}.jobs
    ADD COLUMN started_at timestamptz,
    ADD COLUMN result jsonb,
    ADD COLUMN errors jsonb;

-- Retention's archive keeps every column of jobs (R26).
ALTER TABLE {schema}.jobs_archive
    ADD COLUMN started_at timestamptz,
    ADD COLUMN result jsonb,
    ADD COLUMN errors jsonb;

-- Recording a failed attempt (X5): the job's errors with one entry appended, keeping the
-- latest `keep` (the caller passes skiplock.core.MAX_RECORDED_ERRORS). A completion and a
-- stale recovery call it for a failed run only: a job that does not fail never pays for
-- it, and the completion statement stays as cheap to start as without it (the same
-- expression written inline cost every batch ~0.1 ms to set up). A value that is not an
-- array (plain SQL) is replaced rather than failing the statement. Times are written in
-- UTC, whatever the session's time zone.
CREATE FUNCTION {schema}.recorded_errors(
    errors jsonb,
    keep integer,
    attempt integer,
    worker_id text,
    claimed_at timestamptz,
    failed_at timestamptz,
    error text
)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
SET timezone = 'UTC'
AS $$
BEGIN
    IF jsonb_typeof(errors) IS DISTINCT FROM 'array' THEN
        errors := '[]'::jsonb;
    ELSIF jsonb_array_length(errors) >= keep THEN
        errors := jsonb_path_query_array(
            errors, '$[last - $n to last]', jsonb_build_object('n', keep - 2)
        );
    END IF;
    RETURN errors || jsonb_build_array(
        jsonb_build_object(
            'attempt', attempt,
            'worker_id', worker_id,
            'claimed_at', claimed_at,
            'failed_at', failed_at,
            'error', error
        )
    );
END
$$;
