-- 0022: search that finds (docs/admin.md, "Search"): list_job_page takes a payload
-- filter (jsonb containment), an error text (the last error and every recorded attempt's,
-- in lower case) and an idempotency key. A key is read through the unique key indexes;
-- an error text walks jobs_errored_idx, the jobs that ever failed (an enqueue writes no
-- entry: its row has neither column set); a payload filter is served by the GIN index
-- jobs_payload_search_idx when an operator created it (opt-in: every enqueue pays for
-- it, benchmarks/results/2026-12-07-search.md) and the filter is selective, else by the
-- bounded walks of 0012.
-- Placeholders: {schema} (quoted schema name).

-- IF NOT EXISTS: on a large table it can be built beforehand with CREATE INDEX
-- CONCURRENTLY (docs/upgrading.md). Its predicate is what the error lane states, and no
-- other statement does.
CREATE INDEX IF NOT EXISTS jobs_errored_idx ON {schema}.jobs (id)
    WHERE (last_error IS NOT NULL OR errors IS NOT NULL);

-- One keyset page of the jobs matching a filter (a NULL argument matches everything;
-- 0022 adds the search: payload containment, error text across attempts, idempotency
-- key):
-- the page's ids in order (resume_after NULL), then, when a walk stopped at its budget
-- before the page was full, one row (id NULL, resume_after: the id that walk reached; the
-- next page continues after it). Jobs are read in lanes, each an ordered walk by id of
-- one index that stops at `lim` matches or `budget` rows read:
--   * the ids filter: the primary key (one row per id);
--   * an idempotency key: the two unique key indexes (at most a job per tenant);
--   * a payload filter, when the lanes below stopped before a full page, and
--     jobs_payload_search_idx (opt-in, docs/admin.md "Search") exists and the filter
--     matches fewer than `search_cap` jobs after the cursor (a probe that stops there):
--     every match through that GIN index, then in id order (a non-selective filter
--     fills its page from the walk first, and never pays for the probe);
--   * an error text: jobs_errored_idx, the jobs that ever failed;
--   * each of failed, dead and cancelled asked for, per kind and tenant asked for (per
--     state alone past 64 pairs): its partial index, exact for state, kind and tenant;
--   * running: jobs_running_kind_idx, every running job (as many as the workers run);
--   * the other states (every state when none is asked for): the primary key.
-- A filter a lane's index does not hold (priority, the time ranges; kind, tenant and
-- state on the primary key) is checked on each row read: that is what can stop a lane at
-- its budget. Matches past the nearest point a lane stopped at are left for the next
-- page, so following the cursor never skips a job. Each lane's statement is planned for
-- its own arguments (EXECUTE, a custom plan; the state is written into the statement so
-- that its partial index is seen to apply) with sequential scans, sorts and bitmap scans
-- disabled: with no statistics or stale ones it is the index walk, never a read of the
-- whole table.
CREATE FUNCTION {schema}.list_job_page(
    ids bigint[],
    states text[],
    kinds text[],
    tenants text[],
    priority_min integer,
    priority_max integer,
    created_since timestamptz,
    created_before timestamptz,
    available_since timestamptz,
    available_before timestamptz,
    after_id bigint,
    lim bigint,
    descending boolean,
    budget bigint,
    payload jsonb,
    error text,
    idem_key text
)
RETURNS TABLE (id bigint, resume_after bigint)
LANGUAGE plpgsql
STABLE
ROWS 100
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_sort = off
SET enable_bitmapscan = off
SET jit = off
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    indexed constant text[] := ARRAY['failed', 'dead', 'cancelled'];
    -- A payload filter with fewer matches than this is served by its GIN index; one with
    -- more is searched by the bounded walks, like any filter no index serves.
    search_cap constant bigint := 5000;
    search text := '';  -- the search's conditions, checked on each row read
    gin boolean;        -- whether a payload filter may be read through its GIN index
    probed bigint;
    lane_budget bigint := budget;
    dir constant text := CASE WHEN descending THEN 'DESC' ELSE 'ASC' END;
    ranges text := '';  -- the filters no lane's index holds, checked on each row read
    named text;         -- kind and tenant, checked on each row read
    walk_states text[];
    -- Lanes: the rows a lane walks (its index's condition) and what each row must pass.
    shapes text[] := '{}';
    conds text[] := '{}';
    checks text[] := '{}';
    lane_states text[] := '{}';
    lane_kinds text[] := '{}';
    lane_tenants text[] := '{}';
    s text;
    k text;
    t text;
    i integer;
    q text;
    r record;
    hits bigint[] := '{}';
    found bigint;
    walked bigint;
    last_id bigint;
    frontier bigint;
    page_ids bigint[];
    source text;
    after constant text := CASE WHEN after_id IS NULL THEN ''
        ELSE format(' AND j.id %s $11', CASE WHEN descending THEN '<' ELSE '>' END) END;
BEGIN
    IF priority_min IS NOT NULL THEN ranges := ranges || ' AND j.priority >= $5'; END IF;
    IF priority_max IS NOT NULL THEN ranges := ranges || ' AND j.priority <= $6'; END IF;
    IF created_since IS NOT NULL THEN ranges := ranges || ' AND j.created_at >= $7'; END IF;
    IF created_before IS NOT NULL THEN ranges := ranges || ' AND j.created_at < $8'; END IF;
    IF available_since IS NOT NULL THEN
        ranges := ranges || ' AND j.available_at >= $9';
    END IF;
    IF available_before IS NOT NULL THEN
        ranges := ranges || ' AND j.available_at < $10';
    END IF;
    IF payload IS NOT NULL THEN search := search || ' AND j.payload @> $17'; END IF;
    IF error IS NOT NULL THEN
        search := search || ' AND (strpos(lower(coalesce(j.last_error, '''')), lower($18)) > 0'
            || ' OR EXISTS (SELECT FROM jsonb_array_elements(CASE jsonb_typeof(j.errors)'
            || ' WHEN ''array'' THEN j.errors END) AS e (v)'
            || ' WHERE strpos(lower(e.v ->> ''error''), lower($18)) > 0))';
    END IF;
    IF idem_key IS NOT NULL THEN
        search := search || ' AND (j.idempotency_key = $19 OR j.tenant_idempotency_key = $19)';
    END IF;
    ranges := ranges || search;
    gin := payload IS NOT NULL AND idem_key IS NULL AND ids IS NULL AND EXISTS (
        SELECT FROM pg_catalog.pg_index AS x
        WHERE x.indexrelid = to_regclass('{schema}.jobs_payload_search_idx')
            AND x.indisvalid AND x.indisready
    );
    named := CASE WHEN kinds IS NOT NULL THEN ' AND j.kind = ANY($3)' ELSE '' END
        || CASE WHEN tenants IS NOT NULL THEN ' AND j.tenant_id = ANY($4)' ELSE '' END;

    IF ids IS NOT NULL OR idem_key IS NOT NULL THEN
        -- One lane of few rows: the ids; the jobs of a key (either unique index), read
        -- whole then ordered by id.
        shapes := ARRAY[CASE WHEN ids IS NOT NULL THEN 'walk' ELSE 'few' END];
        conds := ARRAY[CASE
            WHEN ids IS NOT NULL THEN 'j.id = ANY($1)'
            ELSE 'j.idempotency_key = $19 UNION ALL SELECT *'
                || ' FROM {schema}.jobs AS j WHERE j.tenant_idempotency_key = $19'
        END];
        checks := ARRAY['true' || ranges || named
            || CASE WHEN states IS NOT NULL THEN ' AND j.status = ANY($2)' ELSE '' END];
        lane_states := ARRAY[NULL]; lane_kinds := ARRAY[NULL]; lane_tenants := ARRAY[NULL];
        IF ids IS NULL THEN lane_budget := search_cap + 1; END IF;
    ELSIF error IS NOT NULL THEN
        -- Only the jobs that ever failed can match: walk them (jobs_errored_idx).
        shapes := ARRAY['walk'];
        conds := ARRAY['(j.last_error IS NOT NULL OR j.errors IS NOT NULL)'];
        checks := ARRAY['true' || ranges || named
            || CASE WHEN states IS NOT NULL THEN ' AND j.status = ANY($2)' ELSE '' END];
        lane_states := ARRAY[NULL]; lane_kinds := ARRAY[NULL]; lane_tenants := ARRAY[NULL];
    ELSE
        FOREACH s IN ARRAY coalesce(states, '{}') LOOP
            CONTINUE WHEN NOT s = ANY(indexed);
            IF coalesce(cardinality(kinds), 1) * coalesce(cardinality(tenants), 1) > 64 THEN
                shapes := shapes || 'walk'::text;
                conds := conds || format('j.status = %L AND j.kind <> ''''', s);
                checks := checks || ('true' || ranges || named);
                lane_states := lane_states || s; lane_kinds := lane_kinds || NULL::text;
                lane_tenants := lane_tenants || NULL::text;
                CONTINUE;
            END IF;
            FOREACH k IN ARRAY coalesce(kinds, ARRAY[NULL]) LOOP
                FOREACH t IN ARRAY coalesce(tenants, ARRAY[NULL]) LOOP
                    shapes := shapes || 'walk'::text;
                    conds := conds || (format('j.status = %L AND ', s) || CASE
                        WHEN k IS NULL AND t IS NULL THEN 'j.kind <> '''''
                        WHEN t IS NULL THEN 'j.attempts >= 0 AND j.kind = $13'
                        WHEN k IS NULL THEN 'j.max_attempts >= 1 AND j.tenant_id = $14'
                        ELSE 'j.priority >= -32768 AND j.kind = $13 AND j.tenant_id = $14'
                    END);
                    checks := checks || ('true' || ranges);
                    lane_states := lane_states || s; lane_kinds := lane_kinds || k;
                    lane_tenants := lane_tenants || t;
                END LOOP;
            END LOOP;
        END LOOP;
        IF 'running' = ANY(states) THEN
            shapes := shapes || 'running'::text;
            conds := conds || ('j.status = ''running''' || named);
            checks := checks || ('true' || ranges);
            lane_states := lane_states || NULL::text; lane_kinds := lane_kinds || NULL::text;
            lane_tenants := lane_tenants || NULL::text;
        END IF;
        IF states IS NULL THEN
            walk_states := NULL;
        ELSE
            walk_states := ARRAY(
                SELECT u.s FROM unnest(states) AS u (s)
                WHERE NOT u.s = ANY(indexed) AND u.s <> 'running'
            );
        END IF;
        IF states IS NULL OR cardinality(walk_states) > 0 THEN
            shapes := shapes || 'walk'::text;
            conds := conds || 'true'::text;
            checks := checks || ('true' || ranges || named
                || CASE WHEN states IS NOT NULL THEN ' AND j.status = ANY($15)' ELSE '' END);
            lane_states := lane_states || NULL::text; lane_kinds := lane_kinds || NULL::text;
            lane_tenants := lane_tenants || NULL::text;
        END IF;
    END IF;

    -- The lanes; then, when they stopped at their budget before a full page, a payload
    -- filter with its GIN index probes its matches after the cursor (at most search_cap,
    -- a bitmap scan) and, if fewer, reads them all through it instead: a whole answer.
    <<search>>
    LOOP
        hits := '{}';
        frontier := NULL;
        FOR i IN 1 .. coalesce(cardinality(shapes), 0) LOOP
            IF shapes[i] = 'few' THEN
                -- OFFSET 0: the rows are read whole (never a walk of the primary key in id
                -- order), then ordered.
                source := format(
                    '(SELECT * FROM {schema}.jobs AS j WHERE %s OFFSET 0) AS j WHERE true', conds[i]
                );
            ELSIF shapes[i] = 'running' THEN
                -- Every running job of the kinds and tenants asked for (through
                -- jobs_running_kind_idx), then in id order.
                source := format('(SELECT * FROM {schema}.jobs AS j WHERE %s OFFSET 0) AS j', conds[i]);
                source := source || ' WHERE true';
            ELSE
                source := format('{schema}.jobs AS j WHERE %s', conds[i]);
            END IF;
            q := format(
                'SELECT j.id, (%s) AS hit FROM %s%s ORDER BY j.id %s LIMIT $16',
                checks[i], source, after, dir
            );
            found := 0;
            walked := 0;
            last_id := NULL;
            FOR r IN EXECUTE q USING ids, states, kinds, tenants, priority_min, priority_max,
                created_since, created_before, available_since, available_before, after_id,
                lane_states[i], lane_kinds[i], lane_tenants[i], walk_states, lane_budget,
                payload, error, idem_key
            LOOP
                walked := walked + 1;
                last_id := r.id;
                IF r.hit THEN
                    hits := hits || r.id;
                    found := found + 1;
                    EXIT WHEN found >= lim;
                END IF;
            END LOOP;
            IF found < lim AND walked >= lane_budget THEN
                frontier := CASE
                    WHEN frontier IS NULL THEN last_id
                    WHEN descending THEN greatest(frontier, last_id)
                    ELSE least(frontier, last_id)
                END;
            END IF;
        END LOOP;

        IF descending THEN
            page_ids := ARRAY(
                SELECT h FROM unnest(hits) AS h WHERE frontier IS NULL OR h >= frontier
                ORDER BY h DESC LIMIT lim
            );
        ELSE
            page_ids := ARRAY(
                SELECT h FROM unnest(hits) AS h WHERE frontier IS NULL OR h <= frontier
                ORDER BY h LIMIT lim
            );
        END IF;
        EXIT search WHEN NOT gin OR frontier IS NULL OR cardinality(page_ids) >= lim;
        gin := false;
        PERFORM pg_catalog.set_config('enable_bitmapscan', 'on', true);
        PERFORM pg_catalog.set_config('enable_indexscan', 'off', true);
        EXECUTE format(
            'SELECT count(*) FROM (SELECT FROM {schema}.jobs AS j WHERE j.payload @> $1%s'
            || ' LIMIT %s) AS m',
            replace(after, '$11', '$2'), search_cap
        ) INTO probed USING payload, after_id;
        EXIT search WHEN probed >= search_cap;  -- not selective: the walks' page
        shapes := ARRAY['few'];
        conds := ARRAY['j.payload @> $17'];
        checks := ARRAY['true' || ranges || named
            || CASE WHEN states IS NOT NULL THEN ' AND j.status = ANY($2)' ELSE '' END];
        lane_states := ARRAY[NULL]; lane_kinds := ARRAY[NULL]; lane_tenants := ARRAY[NULL];
        lane_budget := search_cap + 1;
    END LOOP;

    resume_after := NULL;
    FOREACH id IN ARRAY page_ids LOOP
        RETURN NEXT;
    END LOOP;
    IF cardinality(page_ids) < lim AND frontier IS NOT NULL THEN
        id := NULL;
        resume_after := frontier;
        RETURN NEXT;
    END IF;
END
$$;

-- The call of the release before 0022 (no search): the same page, without one, so its
-- operator reads keep working during a rolling upgrade.
CREATE OR REPLACE FUNCTION {schema}.list_job_page(
    ids bigint[],
    states text[],
    kinds text[],
    tenants text[],
    priority_min integer,
    priority_max integer,
    created_since timestamptz,
    created_before timestamptz,
    available_since timestamptz,
    available_before timestamptz,
    after_id bigint,
    lim bigint,
    descending boolean,
    budget bigint
)
RETURNS TABLE (id bigint, resume_after bigint)
LANGUAGE sql
STABLE
ROWS 100
AS $$
    SELECT p.id, p.resume_after
    FROM {schema}.list_job_page(
        ids, states, kinds, tenants, priority_min, priority_max, created_since,
        created_before, available_since, available_before, after_id, lim, descending,
        budget, NULL::jsonb, NULL::text, NULL::text
    ) AS p
$$;
