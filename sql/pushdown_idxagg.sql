--
-- pushdown_idxagg: count(*) answered from an index table.  When every WHERE
-- clause is an exact condition on the keys of one index table (equalities
-- and IN on a key prefix, then at most one range) and each fact has one
-- entry, count(*) is a "count" command on the index collection, which the
-- server answers from index keys alone; count(*) GROUP BY a key is an
-- aggregate grouping the entries, min() and max() of a key a find of one
-- entry.  Every result is compared with
-- idxtable.enable_aggregate_pushdown off.
--
CREATE FOREIGN TABLE ag (id int OPTIONS (field '_id'), town text, n int,
  code int, tags text[], ts timestamp, flag boolean)
  SERVER mongo OPTIONS (collection 'idxagg_facts');
DO $$ BEGIN DELETE FROM ag; END $$;	-- a leftover of an earlier run
-- 2000 facts, 200 per town; n is NULL for every fiftieth; code is unique
-- and NULL for every hundredth
INSERT INTO ag
  SELECT i, 'Town' || (i % 10), CASE WHEN i % 50 = 0 THEN NULL ELSE i % 100 END,
         CASE WHEN i % 100 = 0 THEN NULL ELSE i END,
         ARRAY['a' || (i % 3), 'b'], timestamp '2020-01-01' + i * interval '1 s',
         i % 2 = 0
  FROM generate_series(1, 2000) i;
SELECT idxtable.create_index('ag', '{town,n}', name => 'ag_town_n');
SELECT idxtable.create_index('ag', '{code}', is_unique => true, name => 'ag_code');
SELECT idxtable.create_index('ag', '{tags}', name => 'ag_tags');
SELECT idxtable.create_index('ag', '{ts}', name => 'ag_ts');
SELECT idxtable.create_index('ag', '{flag}', name => 'ag_flag');
ANALYZE ag;
-- with index_consistency current (the default) the count waits for the
-- applier as a routed scan does, then counts index keys: one round trip
EXPLAIN (VERBOSE, COSTS OFF) SELECT count(*) FROM ag WHERE town = 'Town3';
EXPLAIN (ANALYZE, BUFFERS OFF, VERBOSE, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT count(*) FROM ag WHERE town = 'Town3';
-- the wait shows with TIMING (its time varies): not with 'any'
CREATE FUNCTION explain_has(query text, pattern text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  line text;
BEGIN
  FOR line IN EXECUTE 'EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, SUMMARY OFF) ' || query LOOP
    IF line LIKE pattern THEN
      RETURN true;
    END IF;
  END LOOP;
  RETURN false;
END $$;
SELECT explain_has($$SELECT count(*) FROM ag WHERE town = 'Town3'$$, '%Sync Wait:%');
SET idxtable.index_consistency = 'any';
SELECT explain_has($$SELECT count(*) FROM ag WHERE town = 'Town3'$$, '%Sync Wait:%');
RESET idxtable.index_consistency;
-- each case counted with the pushdown (from_index says whether the plan
-- counts from an index table), then without it
CREATE TEMP TABLE cases (q int, cond text);
INSERT INTO cases VALUES
  (1, $$town = 'Town3'$$),
  (2, $$town = 'Town3' AND n >= 10 AND n < 50$$),
  (3, $$town IN ('Town0', 'Town4', NULL)$$),
  (4, $$town = 'Town0' AND n IS NULL$$),
  (5, $$town = 'Town9' AND n > 95$$),
  (6, $$code = 777$$),
  (7, $$code IS NULL$$),
  (8, $$code < 100$$),
  (9, $$flag$$),
  (10, $$flag = false$$),
  (11, $$town = 'Nowhere'$$),
  (12, $$town = ANY ('{}'::text[])$$),
  (13, $$town = 'Town1' AND n = 1::bigint$$),
  (14, $$n < 10 AND town = 'Town1'$$),
  (15, $$town COLLATE "C" < 'Town3'$$),
  (16, $$town = 'Town1' AND n = 1 AND n = 1$$);
CREATE FUNCTION count_case(cond text, OUT n bigint, OUT from_index boolean)
LANGUAGE plpgsql AS $$
DECLARE
  line text;
BEGIN
  from_index := false;
  FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) SELECT count(*) FROM ag WHERE ' || cond LOOP
    from_index := from_index OR line LIKE '%(count)%';
  END LOOP;
  EXECUTE 'SELECT count(*) FROM ag WHERE ' || cond INTO n;
END $$;
CREATE TEMP TABLE counts AS
  SELECT q, cond, (count_case(cond)).* FROM cases;
SET idxtable.enable_aggregate_pushdown = off;
SELECT q, c.cond, c.from_index, c.n AS pushed, l.n AS local, c.n = l.n AS same
  FROM counts c, LATERAL count_case(c.cond) l ORDER BY q;
RESET idxtable.enable_aggregate_pushdown;
-- a subquery's WHERE clause, and the conditions shown in key order
EXPLAIN (VERBOSE, COSTS OFF)
  SELECT count(*) FROM (SELECT * FROM ag WHERE n < 10) s, (SELECT 1) one
  WHERE s.town = 'Town1';
-- GROUP BY a key: a count per key from an aggregate ($match, $group) on
-- the index collection, NULL keys one group; compared with the pushdown off.
-- It is chosen where its filter reads fewer entries than a pipeline over
-- the facts (agg_path.c) reads facts; over the whole table the facts'
-- pipeline costs less (an entry costs a little more to read)
EXPLAIN (VERBOSE, COSTS OFF) SELECT n, count(*) FROM ag WHERE town = 'Town0' GROUP BY n;
EXPLAIN (VERBOSE, COSTS OFF) SELECT town, count(*) FROM ag GROUP BY town;
-- as for routed scans, plain reads of the facts are made to look expensive
-- below, so that every grouping of the test reads the entries
SET idxtable.enable_plain_scan = off;
EXPLAIN (VERBOSE, COSTS OFF) SELECT town, count(*) FROM ag GROUP BY town;
EXPLAIN (ANALYZE, BUFFERS OFF, VERBOSE, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT n, count(*), 'x' FROM ag WHERE town = 'Town0' GROUP BY n;
CREATE TEMP TABLE groups_on AS
  SELECT 1 AS q, town AS k, count(*) AS n FROM ag GROUP BY town
  UNION ALL SELECT 2, n::text, count(*) FROM ag WHERE town = 'Town0' GROUP BY n
  UNION ALL SELECT 3, code::text, count(*) FROM ag WHERE code < 5 GROUP BY code
  UNION ALL SELECT 4, flag::text, count(*) FROM ag GROUP BY flag
  UNION ALL SELECT 5, NULL, count(*) FROM ag WHERE town = 'Town2' GROUP BY n
  UNION ALL SELECT 6, n::text, count(*) FROM ag WHERE town = 'Nowhere' GROUP BY n;
SET idxtable.enable_aggregate_pushdown = off;
CREATE TEMP TABLE groups_off AS
  SELECT 1 AS q, town AS k, count(*) AS n FROM ag GROUP BY town
  UNION ALL SELECT 2, n::text, count(*) FROM ag WHERE town = 'Town0' GROUP BY n
  UNION ALL SELECT 3, code::text, count(*) FROM ag WHERE code < 5 GROUP BY code
  UNION ALL SELECT 4, flag::text, count(*) FROM ag GROUP BY flag
  UNION ALL SELECT 5, NULL, count(*) FROM ag WHERE town = 'Town2' GROUP BY n
  UNION ALL SELECT 6, n::text, count(*) FROM ag WHERE town = 'Nowhere' GROUP BY n;
RESET idxtable.enable_aggregate_pushdown;
SELECT q, count(*) AS groups, sum(n) AS rows FROM groups_on GROUP BY q ORDER BY q;
(SELECT * FROM groups_on EXCEPT ALL SELECT * FROM groups_off)
  UNION ALL (SELECT * FROM groups_off EXCEPT ALL SELECT * FROM groups_on);
SELECT town, count(*) FROM ag GROUP BY town ORDER BY town;
-- min() and max() of a key: a find sorted on the key, limit 1, each (NULL
-- keys left out); three round trips with a count, which a small set of
-- entries read locally beats
EXPLAIN (ANALYZE, BUFFERS OFF, VERBOSE, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT min(code), max(code) FROM ag;
RESET idxtable.enable_plain_scan;
EXPLAIN (COSTS OFF) SELECT min(n), max(n), count(*), 'x' FROM ag WHERE town = 'Town3';
CREATE TEMP TABLE extremes_on AS
  SELECT 1 AS q, min(code)::text AS lo, max(code)::text AS hi FROM ag
  UNION ALL SELECT 2, min(n)::text, max(n)::text FROM ag WHERE town = 'Town3'
  UNION ALL SELECT 3, min(n)::text, max(n)::text FROM ag WHERE town = 'Nowhere'
  UNION ALL SELECT 4, min(town), max(town) FROM ag
  UNION ALL SELECT 5, min(code)::text, count(*)::text FROM ag WHERE code > 1500
  UNION ALL SELECT 6, min(n)::text, max(n)::text FROM ag WHERE town = 'Town0' AND n < 40;
SET idxtable.enable_aggregate_pushdown = off;
CREATE TEMP TABLE extremes_off AS
  SELECT 1 AS q, min(code)::text AS lo, max(code)::text AS hi FROM ag
  UNION ALL SELECT 2, min(n)::text, max(n)::text FROM ag WHERE town = 'Town3'
  UNION ALL SELECT 3, min(n)::text, max(n)::text FROM ag WHERE town = 'Nowhere'
  UNION ALL SELECT 4, min(town), max(town) FROM ag
  UNION ALL SELECT 5, min(code)::text, count(*)::text FROM ag WHERE code > 1500
  UNION ALL SELECT 6, min(n)::text, max(n)::text FROM ag WHERE town = 'Town0' AND n < 40;
RESET idxtable.enable_aggregate_pushdown;
SELECT * FROM extremes_on ORDER BY q;
(SELECT * FROM extremes_on EXCEPT ALL SELECT * FROM extremes_off)
  UNION ALL (SELECT * FROM extremes_off EXCEPT ALL SELECT * FROM extremes_on);
-- not from an index: min() of a timestamp key, of two keys
EXPLAIN (COSTS OFF) SELECT min(ts) FROM ag;
EXPLAIN (COSTS OFF) SELECT min(code), max(n) FROM ag WHERE town = 'Town3';
-- not per key from an index: a timestamp or multi-valued key, two grouping
-- columns, HAVING, an aggregate other than count(*)
EXPLAIN (COSTS OFF) SELECT ts, count(*) FROM ag GROUP BY ts;
EXPLAIN (COSTS OFF) SELECT tags, count(*) FROM ag GROUP BY tags;
EXPLAIN (COSTS OFF) SELECT town, n, count(*) FROM ag GROUP BY town, n;
EXPLAIN (COSTS OFF) SELECT town, count(*) FROM ag GROUP BY town HAVING count(*) > 1;
EXPLAIN (COSTS OFF) SELECT town, max(n) FROM ag GROUP BY town;
-- constants beside the count, and two counts
SELECT 'x' AS c, count(*), 42 AS answer, count(*) AS again FROM ag WHERE code >= 1990;
EXPLAIN (VERBOSE, COSTS OFF)
  SELECT 'x' AS c, count(*), 42 AS answer FROM ag WHERE code >= 1990;
-- a condition that can match nothing sends no command
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT count(*) FROM ag WHERE town = ANY ('{}'::text[]);
-- parameters of a generic plan, NULL included
SET plan_cache_mode = force_generic_plan;
PREPARE by_town(text, int) AS
  SELECT count(*) FROM ag WHERE town = $1 AND n < $2;
EXPLAIN (COSTS OFF) EXECUTE by_town('Town5', 50);
EXECUTE by_town('Town5', 50);
EXECUTE by_town('Town5', 10);
EXECUTE by_town(NULL, 10);
DEALLOCATE by_town;
RESET plan_cache_mode;
-- not from the index: no WHERE, a multi-valued key (a fact has an entry
-- per element), a timestamp key (entries keep milliseconds), a clause the
-- index cannot express, a text range on a table without a consistency
-- option (see below), a key that is not the index's first, count(column),
-- HAVING, DISTINCT
EXPLAIN (COSTS OFF) SELECT count(*) FROM ag;
EXPLAIN (COSTS OFF) SELECT count(*) FROM ag WHERE 'a1' = ANY (tags);
EXPLAIN (COSTS OFF) SELECT count(*) FROM ag WHERE ts < '2020-01-01 00:00:10';
EXPLAIN (COSTS OFF) SELECT count(*) FROM ag WHERE town = 'Town3' AND code > 5;
EXPLAIN (COSTS OFF) SELECT count(*) FROM ag WHERE town = 'Town3' AND n <> 5;
EXPLAIN (COSTS OFF) SELECT count(*) FROM ag WHERE town < 'Town3';
EXPLAIN (COSTS OFF) SELECT count(*) FROM ag WHERE n = 5;
EXPLAIN (COSTS OFF) SELECT count(n) FROM ag WHERE town = 'Town3';
EXPLAIN (COSTS OFF) SELECT count(*) FROM ag WHERE town = 'Town3' HAVING count(*) > 1;
EXPLAIN (COSTS OFF) SELECT count(DISTINCT n) FROM ag WHERE town = 'Town3';
-- a text range is exact on the entries where they hold the collation's
-- order, but pushed down to the facts only with a recheck: counted from
-- the index where the table's consistency mode says its writes are never
-- "ordered" (the facts need not be counted instead); also under an ICU
-- collation, whose entries hold sort keys
ALTER FOREIGN TABLE ag OPTIONS (ADD consistency 'transaction');
EXPLAIN (COSTS OFF) SELECT count(*) FROM ag WHERE town COLLATE "C" < 'Town3';
SELECT count(*) FROM ag WHERE town COLLATE "C" < 'Town3';
CREATE FOREIGN TABLE agw (id int OPTIONS (field '_id'),
  w text OPTIONS (field 'town') COLLATE "en-x-icu")
  SERVER mongo OPTIONS (collection 'idxagg_facts', consistency 'transaction');
SELECT idxtable.create_index('agw', '{w}', name => 'agw_w');
EXPLAIN (VERBOSE, COSTS OFF) SELECT count(*) FROM agw WHERE w >= 'town3' AND w < 'TOWN5';
SELECT count(*) FROM agw WHERE w >= 'town3' AND w < 'TOWN5';
SELECT count(*) FROM agw WHERE w IN ('Town1', 'town1');
-- groups of a sort-key key give back the text the entries end with
SET idxtable.enable_plain_scan = off;
EXPLAIN (COSTS OFF) SELECT w, count(*) FROM agw GROUP BY w;
RESET idxtable.enable_plain_scan;
SELECT w, count(*) FROM agw GROUP BY w ORDER BY w;
SET idxtable.enable_aggregate_pushdown = off;
SELECT count(*) FROM agw WHERE w >= 'town3' AND w < 'TOWN5';
SELECT count(*) FROM agw WHERE w IN ('Town1', 'town1');
SELECT w, count(*) FROM agw GROUP BY w ORDER BY w;
RESET idxtable.enable_aggregate_pushdown;
SELECT idxtable.drop_index('agw_w');
DROP FOREIGN TABLE agw;
ALTER FOREIGN TABLE ag OPTIONS (DROP consistency);
-- inside a MongoDB transaction (after a write) the count is an aggregate
-- with $count, and sees the transaction's own writes
BEGIN;
INSERT INTO ag (id, town, n, code) VALUES (5001, 'Town3', 7, 5001);
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT count(*) FROM ag WHERE town = 'Town3';
SELECT count(*) FROM ag WHERE town = 'Town3';
SELECT count(*) FROM ag WHERE code = 5001;
ROLLBACK;
SELECT count(*) FROM ag WHERE town = 'Town3';
-- index_consistency current never routes through an index that no applier
-- maintains (a server with change_streams off); 'any' counts from it
CREATE FOREIGN TABLE ag2 (id int OPTIONS (field '_id'), town text, n int)
  SERVER mongo_nostream OPTIONS (collection 'idxagg_facts');
SELECT idxtable.create_index('ag2', '{town}', name => 'ag2_town');
EXPLAIN (COSTS OFF) SELECT count(*) FROM ag2 WHERE town = 'Town3';
SET idxtable.index_consistency = 'any';
EXPLAIN (COSTS OFF) SELECT count(*) FROM ag2 WHERE town = 'Town3';
SELECT count(*) FROM ag2 WHERE town = 'Town3';
-- ordered writes may leave orphaned entries: no count from the index
ALTER FOREIGN TABLE ag2 OPTIONS (ADD consistency 'ordered');
EXPLAIN (COSTS OFF) SELECT count(*) FROM ag2 WHERE town = 'Town3';
SELECT count(*) FROM ag2 WHERE town = 'Town3';
RESET idxtable.index_consistency;
-- idxtable.enable_index_routing off: no index table at all
SET idxtable.enable_index_routing = off;
EXPLAIN (COSTS OFF) SELECT count(*) FROM ag WHERE town = 'Town3';
RESET idxtable.enable_index_routing;
SELECT idxtable.drop_index('ag2_town');
DROP FOREIGN TABLE ag2;
DROP FUNCTION count_case(text);
DROP FUNCTION explain_has(text, text);
SELECT idxtable.drop_index(name) FROM idxtable.index_defs
  WHERE name LIKE 'ag\_%' ORDER BY name;
DROP FOREIGN TABLE ag;
