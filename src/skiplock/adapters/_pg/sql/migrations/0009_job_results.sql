-- 0009: what a job's runs produced (X5): when it first started, the processor's return
-- value, and its failed attempts. Placeholders: {schema} (quoted schema name).
--
-- Nullable columns without a default: adding them rewrites nothing (instant on a large
-- table), and a job that never started, returned nothing or never failed costs no space
-- (a NULL is a bit in the row's null bitmap). Rows written before keep NULL: they have no
-- recorded history, and a backfill would rewrite the whole hot table.
--   started_at: the time of the first claim that ran the job.
--   result:     the processor's return value as JSON (succeeded jobs only).
--   errors:     a JSON array of the latest failed attempts, oldest first, each
--               {"attempt", "worker_id", "claimed_at", "failed_at", "error"}; appended
--               only when an attempt fails, bounded (skiplock.core.MAX_RECORDED_ERRORS).
ALTER TABLE {schema}.jobs
    ADD COLUMN started_at timestamptz,
    ADD COLUMN result jsonb,
    ADD COLUMN errors jsonb;

-- Retention's archive keeps every column of jobs (R26).
ALTER TABLE {schema}.jobs_archive
    ADD COLUMN started_at timestamptz,
    ADD COLUMN result jsonb,
    ADD COLUMN errors jsonb;
