-- 0004: whether a job's max_attempts was chosen at enqueue, whether its claim paid for a
-- start, whether it was recovered, and update notifications judged on the statement's
-- time.
-- Placeholders: {schema} (quoted schema name), {channel} (quoted channel literal text).

-- False: max_attempts is only the enqueuing node's default, and the worker that claims
-- the job writes its own policy's value. The default makes a plain-SQL insert "not
-- explicit"; a constant default adds the column without rewriting the table.
ALTER TABLE {schema}.jobs ADD COLUMN explicit_max_attempts boolean NOT NULL DEFAULT false;
ALTER TABLE {schema}.jobs_archive
    ADD COLUMN explicit_max_attempts boolean NOT NULL DEFAULT false;

-- Set while the job's current claim has started it (at claim for the jobs that start at
-- once, by start() for held ones); cleared by every outcome and operator event. Stale
-- recovery keeps it: a pending job with the mark is a suspect (its worker may have died
-- of it), which the next claim starts alone.
ALTER TABLE {schema}.jobs ADD COLUMN started boolean NOT NULL DEFAULT false;
ALTER TABLE {schema}.jobs_archive ADD COLUMN started boolean NOT NULL DEFAULT false;

-- Set when stale recovery (or a worker's re-registration) returned the job to pending,
-- until its next outcome: the worker that claims it pays its attempt before running it.
ALTER TABLE {schema}.jobs ADD COLUMN recovered boolean NOT NULL DEFAULT false;
ALTER TABLE {schema}.jobs_archive ADD COLUMN recovered boolean NOT NULL DEFAULT false;

-- Completions now stamp completed_at and a retry's due time with statement_timestamp(),
-- which inside a job's transaction is later than now() (the transaction's start): an
-- immediate retry written there must still count as due when the trigger checks it.
DROP TRIGGER jobs_notify_update ON {schema}.jobs;

CREATE TRIGGER jobs_notify_update
    AFTER UPDATE ON {schema}.jobs
    FOR EACH ROW
    WHEN (NEW.status = 'pending' AND NEW.available_at <= statement_timestamp())
    EXECUTE FUNCTION {schema}.notify_job('{channel}');
