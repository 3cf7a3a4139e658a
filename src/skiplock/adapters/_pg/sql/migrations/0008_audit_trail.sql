-- 0008: the audit trail (J10): each event names its job's kind and tenant, and
-- retention deletes old events through a walk whose plan does not depend on statistics.
-- Placeholders: {schema} (quoted schema name).

-- The job may be gone (deleted, purged) while its events stay: they keep what it was.
ALTER TABLE {schema}.audit
    ADD COLUMN kind text,
    ADD COLUMN tenant_id text;

-- Retention: the walk that finds the oldest audit events of a purge batch, planned with
-- sorts and bitmap scans disabled so its plan is the ordered walk of audit_at_idx
-- whatever the statistics say (an audit table filled between two ANALYZE runs looks
-- empty): O(batch), never O(table), as purge_candidates (0007) for jobs. Events are
-- never updated and one node purges at a time (an advisory lock), so nothing is locked.
CREATE FUNCTION {schema}.purge_audit_candidates(older_than interval, batch integer)
RETURNS SETOF bigint
LANGUAGE plpgsql
VOLATILE
ROWS 10
SET search_path = pg_catalog, pg_temp
SET enable_sort = off
SET enable_bitmapscan = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN QUERY
    SELECT a.id
    FROM {schema}.audit AS a
    WHERE a.at < now() - older_than
    ORDER BY a.at
    LIMIT batch;
END
$$;
