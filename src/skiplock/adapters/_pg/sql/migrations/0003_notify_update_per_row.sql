-- 0003: the update trigger fires only for rows that become claimable.
-- Placeholders: {schema} (quoted schema name), {channel} (quoted channel literal text).

-- A statement-level trigger with a transition table made PostgreSQL copy every updated
-- row into a tuplestore for each claim and completion, only to find nothing to notify.
-- A row trigger with a WHEN clause costs nothing for those (the condition is checked in
-- the executor, no function call) and notifies for retries, releases, replays and stale
-- recoveries that are due now. Inserts keep the statement-level trigger: a bulk insert
-- notifies once per kind, not once per row.
DROP TRIGGER jobs_notify_update ON {schema}.jobs;

CREATE FUNCTION {schema}.notify_job() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_ARGV[0], NEW.kind);
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_notify_update
    AFTER UPDATE ON {schema}.jobs
    FOR EACH ROW
    WHEN (NEW.status = 'pending' AND NEW.available_at <= now())
    EXECUTE FUNCTION {schema}.notify_job('{channel}');
