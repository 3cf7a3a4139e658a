-- 0023: error search through an opt-in index (docs/search.md, "The opt-in search
-- indexes"). job_error_text (with job_error_lines) is the text an error search looks
-- in: the last error and each recorded attempt's, in lower case. `skiplock schema index
-- add error` builds the trigram index jobs_error_search_idx over it (pg_trgm; opt-in,
-- as jobs_payload_search_idx is). When it exists, list_job_page reads a selective error
-- text's candidates through it (LIKE '%text%') and checks each as the walk does: a
-- whole answer instead of a bounded walk of the jobs that ever failed. Without it,
-- nothing changes. list_job_page also scopes enable_indexscan to itself (its probe
-- turns it off).
-- Placeholders: {schema} (quoted schema name).

-- The text an error search looks in (0023): a job's last error and each recorded
-- attempt's error, one a line, in lower case. The opt-in trigram index
-- jobs_error_search_idx is built over it (docs/search.md, "The opt-in search indexes";
-- `skiplock schema index add error`); a search reads its candidates through that index
-- and checks each as the walk does (a text across two lines is no match). A plain
-- expression, inlined where it is used: a row without recorded errors costs no call (a
-- lossy bitmap page rechecks every row on it); job_error_lines joins the recorded ones.
-- A later change of either function must rebuild jobs_error_search_idx (drop it, add it
-- again).
CREATE FUNCTION {schema}.job_error_lines(errors jsonb)
RETURNS text
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    SELECT pg_catalog.array_to_string(ARRAY(
        SELECT e.v ->> 'error' FROM pg_catalog.jsonb_array_elements(errors) AS e (v)
    ), E'\n')
$$;

CREATE FUNCTION {schema}.job_error_text(last_error text, errors jsonb)
RETURNS text
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    SELECT pg_catalog.lower(CASE WHEN pg_catalog.jsonb_typeof(errors) = 'array'
        THEN coalesce(last_error, '') || E'\n' || {schema}.job_error_lines(errors)
        ELSE last_error END)
$$;

-- One keyset page of the jobs matching a filter (a NULL argument matches everything;
-- 0022 adds the search: payload containment, error text across attempts, idempotency
-- key; 0023 reads an error text through its opt-in trigram index):
-- the page's ids in order (resume_after NULL), then, when a walk stopped at its budget
-- before the page was full, one row (id NULL, resume_after: the id that walk reached; the
-- next page continues after it). Jobs are read in lanes, each an ordered walk by id of
-- one index that stops at `lim` matches or `budget` rows read:
--   * the ids filter: the primary key (one row per id);
--   * an idempotency key: the two unique key indexes (at most a job per tenant);
--   * a payload filter or an error text, when the lanes below stopped before a full
--     page, and its opt-in index exists (docs/search.md, "The opt-in search indexes":
--     jobs_payload_search_idx for a payload, jobs_error_search_idx over job_error_text
--     for an error text of 3 characters or more) and the search matches fewer than
--     `search_cap` jobs after the cursor by that index (a probe that stops there):
--     every match through that GIN index, each checked as the lanes check it, then in
--     id order (a non-selective search fills its page from the walk first, and never
--     pays for the probe; nor does an error text the walk found in many of the rows it
--     read; the payload's index is probed first);
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
SET enable_indexscan = on
SET jit = off
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    indexed constant text[] := ARRAY['failed', 'dead', 'cancelled'];
    -- A search with fewer matches than this by its opt-in GIN index is read through it;
    -- one with more is searched by the bounded walks, like any filter no index serves.
    search_cap constant bigint := 5000;
    search text := '';  -- the search's conditions, checked on each row read
    -- The opt-in indexes the search may be read through, in the order they are probed:
    -- the condition each serves (what the probe counts and the lane reads by).
    probes text[] := '{}';
    probe text;
    chosen text;
    -- What the error index answers, its predicate stated so that the planner sees it
    -- applies.
    error_probe constant text := '{schema}.job_error_text(j.last_error, j.errors) LIKE $20'
        || ' AND (j.last_error IS NOT NULL OR j.errors IS NOT NULL)';
    -- An error text's own condition (true without one), checked on each row read apart
    -- from the other conditions, and how many of the rows the walk read hold it: a text
    -- the walk finds common is not probed for (its trigrams would be read whole).
    texted text := 'true';
    text_hits bigint := 0;
    text_walked bigint := 0;
    -- An error text as a LIKE pattern over job_error_text (lower case, \, % and _
    -- escaped): what jobs_error_search_idx answers; the lanes check the exact condition.
    pattern constant text := '%' || replace(replace(replace(lower(error), E'\\', E'\\\\'),
        '%', E'\\%'), '_', E'\\_') || '%';
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
        texted := '(strpos(lower(coalesce(j.last_error, '''')), lower($18)) > 0'
            || ' OR EXISTS (SELECT FROM jsonb_array_elements(CASE jsonb_typeof(j.errors)'
            || ' WHEN ''array'' THEN j.errors END) AS e (v)'
            || ' WHERE strpos(lower(e.v ->> ''error''), lower($18)) > 0))';
    END IF;
    IF idem_key IS NOT NULL THEN
        search := search || ' AND (j.idempotency_key = $19 OR j.tenant_idempotency_key = $19)';
    END IF;
    ranges := ranges || search;
    IF idem_key IS NULL AND ids IS NULL THEN
        IF payload IS NOT NULL AND EXISTS (
            SELECT FROM pg_catalog.pg_index AS x
            WHERE x.indexrelid = to_regclass('{schema}.jobs_payload_search_idx')
                AND x.indisvalid AND x.indisready
        ) THEN
            probes := probes || 'j.payload @> $17'::text;
        END IF;
        -- A shorter text has no trigram: the index would be read whole.
        IF char_length(error) >= 3 AND EXISTS (
            SELECT FROM pg_catalog.pg_index AS x
            WHERE x.indexrelid = to_regclass('{schema}.jobs_error_search_idx')
                AND x.indisvalid AND x.indisready
        ) THEN
            probes := probes || error_probe;
        END IF;
    END IF;
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

    -- The lanes; then, when they stopped at their budget before a full page, a search
    -- with an opt-in GIN index probes its matches after the cursor through it (at most
    -- search_cap, a bitmap scan) and, if fewer, reads them all through it instead, each
    -- checked as the lanes check it: a whole answer.
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
                'SELECT j.id, (%s) AS hit, (%s) AS text_hit FROM %s%s ORDER BY j.id %s LIMIT $16',
                checks[i], texted, source, after, dir
            );
            found := 0;
            walked := 0;
            last_id := NULL;
            FOR r IN EXECUTE q USING ids, states, kinds, tenants, priority_min, priority_max,
                created_since, created_before, available_since, available_before, after_id,
                lane_states[i], lane_kinds[i], lane_tenants[i], walk_states, lane_budget,
                payload, error, idem_key, pattern
            LOOP
                walked := walked + 1;
                last_id := r.id;
                IF r.text_hit THEN text_hits := text_hits + 1; END IF;
                IF r.hit AND r.text_hit THEN
                    hits := hits || r.id;
                    found := found + 1;
                    EXIT WHEN found >= lim;
                END IF;
            END LOOP;
            text_walked := text_walked + walked;
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
        EXIT search WHEN cardinality(probes) = 0 OR frontier IS NULL
            OR cardinality(page_ids) >= lim;
        PERFORM pg_catalog.set_config('enable_bitmapscan', 'on', true);
        PERFORM pg_catalog.set_config('enable_indexscan', 'off', true);
        chosen := NULL;
        FOREACH probe IN ARRAY probes LOOP
            -- The walk's share of rows holding the text, times the jobs that ever failed
            -- (jobs_errored_idx's row count as of its last vacuum or analyze): at least
            -- search_cap, the text is not selective (the walk's page, as without the index).
            CONTINUE WHEN probe = error_probe AND text_hits * coalesce((
                SELECT c.reltuples FROM pg_catalog.pg_class AS c
                WHERE c.oid = to_regclass('{schema}.jobs_errored_idx')
            ), 0) >= search_cap * text_walked;
            EXECUTE format(
                'SELECT count(*) FROM (SELECT FROM {schema}.jobs AS j WHERE %s%s LIMIT %s) AS m',
                probe, after, search_cap
            ) INTO probed USING ids, states, kinds, tenants, priority_min, priority_max,
                created_since, created_before, available_since, available_before, after_id,
                NULL::text, NULL::text, NULL::text, NULL::text[], lane_budget, payload, error,
                idem_key, pattern;
            IF probed < search_cap THEN
                chosen := probe;
                EXIT;
            END IF;
        END LOOP;
        probes := '{}';
        EXIT search WHEN chosen IS NULL;  -- not selective: the walks' page
        shapes := ARRAY['few'];
        conds := ARRAY[chosen];
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
