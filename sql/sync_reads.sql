--
-- sync_reads: idxtable.index_consistency and idxtable.sync_wait_timeout.
-- With "current" (the default) the planner routes only through index
-- tables that a change-stream applier maintains, and a routed scan first
-- waits until the applier has applied every write made before it; with
-- "any" every valid index table is routed through, without a wait.
-- (test/sync_reads.py tests what needs timing: a stopped applier, writes
-- made straight to MongoDB, the wait's latency.)
--
SHOW idxtable.index_consistency;
SHOW idxtable.sync_wait_timeout;
SET idxtable.index_consistency = sometimes;
SELECT show_error('SET idxtable.sync_wait_timeout = -1');
SET idxtable.sync_wait_timeout = '2s';
SHOW idxtable.sync_wait_timeout;
SET idxtable.index_consistency = 'any';
SHOW idxtable.index_consistency;
RESET idxtable.sync_wait_timeout;
RESET idxtable.index_consistency;
-- a server of its own: no applier serves it before its first index table
-- is committed
\set server mongo_sync
\set mongo_database idxtable_regress
\i test/fixtures/server.sql
CREATE FOREIGN TABLE sync_people (id int OPTIONS (field '_id'), email text,
  town text) SERVER mongo_sync OPTIONS (collection 'sync_people');
DELETE FROM sync_people;
INSERT INTO sync_people
  SELECT i, 'p' || i || '@example.com', 'Town' || (i % 10)
  FROM generate_series(1, 200) i;
BEGIN;
SELECT idxtable.create_index('sync_people', '{town}', name => 'sync_people_town');
SET LOCAL idxtable.enable_plain_scan = off;
-- "current": until COMMIT no applier follows the new index, so a plain scan
EXPLAIN (COSTS OFF) SELECT id FROM sync_people WHERE town = 'Town3';
-- "any": the index table is used, as it is
SET LOCAL idxtable.index_consistency = 'any';
EXPLAIN (COSTS OFF) SELECT id FROM sync_people WHERE town = 'Town3';
SELECT count(*) FROM sync_people WHERE town = 'Town3';
-- a plan made with "any" and run with "current": the scan cannot wait
SET LOCAL plan_cache_mode = force_generic_plan;
PREPARE town_ids(text) AS SELECT id FROM sync_people WHERE town = $1;
EXPLAIN (COSTS OFF) EXECUTE town_ids('Town3');
SET LOCAL idxtable.index_consistency = current;
SET LOCAL idxtable.sync_wait_timeout = 100;
SELECT show_error($$EXECUTE town_ids('Town3')$$);
-- the failure invalidated the cached plan: planned again, a plain scan
EXPLAIN (COSTS OFF) EXECUTE town_ids('Town3');
ROLLBACK;
DEALLOCATE town_ids;
-- the same, committed: the applier of (mongo_sync, owner) starts and
-- follows it; wait until idxtable.sync_status shows it streaming
SELECT idxtable.create_index('sync_people', '{town}', name => 'sync_people_town');
SELECT idxtable.create_index('sync_people', '{lower(email)}', is_unique => true,
                             name => 'sync_people_email');
CREATE FUNCTION sync_wait_streaming(idx text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..600 LOOP
    IF EXISTS (SELECT FROM idxtable.sync_status
               WHERE name = idx AND lag IS NOT NULL) THEN
      RETURN true;
    END IF;
    PERFORM pg_sleep(0.1);
  END LOOP;
  RETURN false;
END $$;
SELECT sync_wait_streaming('sync_people_town'), sync_wait_streaming('sync_people_email');
SELECT name, state, applied_through IS NOT NULL AS applied, last_error
  FROM idxtable.sync_status WHERE name LIKE 'sync_people%' ORDER BY name;
SET idxtable.enable_plain_scan = off;
-- "current": routed, and the scan waits (shown by EXPLAIN ANALYZE with TIMING)
EXPLAIN (COSTS OFF) SELECT id FROM sync_people WHERE town = 'Town3';
SELECT count(*) FROM sync_people WHERE town = 'Town3';
EXPLAIN (COSTS OFF) SELECT id, town FROM sync_people WHERE lower(email) = 'p42@example.com';
SELECT id, town FROM sync_people WHERE lower(email) = 'p42@example.com';
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT id FROM sync_people WHERE town = 'Town3';
CREATE FUNCTION sync_explain(query text) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
  line text;
BEGIN
  FOR line IN EXECUTE 'EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, SUMMARY OFF) ' || query LOOP
    RETURN NEXT regexp_replace(line, '[0-9]+(\.[0-9]+)?', 'N', 'g');
  END LOOP;
END $$;
SELECT sync_explain($$SELECT id FROM sync_people WHERE town = 'Town3'$$);
-- covering reads wait the same way
SELECT sync_explain($$SELECT town FROM sync_people WHERE town = 'Town3'$$);
-- a Sync Wait is a time: never negative, and below the timeout
CREATE FUNCTION sync_wait_ms(query text) RETURNS float8
LANGUAGE plpgsql AS $$
DECLARE
  plan json;
BEGIN
  EXECUTE 'EXPLAIN (ANALYZE, FORMAT JSON) ' || query INTO plan;
  RETURN (plan -> 0 -> 'Plan' ->> 'Sync Wait')::float8;
END $$;
SELECT sync_wait_ms($$SELECT id FROM sync_people WHERE town = 'Town3'$$)
  BETWEEN 0 AND 5000 AS in_range;
-- "any": routed, no wait
SET idxtable.index_consistency = 'any';
SELECT sync_explain($$SELECT id FROM sync_people WHERE town = 'Town3'$$);
SELECT sync_wait_ms($$SELECT id FROM sync_people WHERE town = 'Town3'$$);
RESET idxtable.index_consistency;
-- a write that claims a unique key waits for the unique index first; a key
-- another fact holds is still a unique violation
INSERT INTO sync_people VALUES (500, 'P42@example.com', 'Town0');
INSERT INTO sync_people VALUES (501, 'p501@example.com', 'Town1');
UPDATE sync_people SET email = 'q501@example.com' WHERE id = 501;
UPDATE sync_people SET email = 'P43@example.com' WHERE id = 501;
SELECT id, email FROM sync_people WHERE lower(email) = 'q501@example.com';
RESET idxtable.enable_plain_scan;
SELECT idxtable.drop_index('sync_people_town');
SELECT idxtable.drop_index('sync_people_email');
DELETE FROM sync_people;
DROP FUNCTION sync_wait_streaming(text);
DROP FUNCTION sync_explain(text);
DROP FUNCTION sync_wait_ms(text);
DROP SERVER mongo_sync CASCADE;
