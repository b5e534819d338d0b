--
-- idlookup: equality and IN on the _id column become an _id lookup
--
CREATE FOREIGN TABLE numbers (id int OPTIONS (field '_id'), v int, label text)
  SERVER mongo OPTIONS (collection 'numbers');
CREATE FOREIGN TABLE objids (id text OPTIONS (field '_id'), k int)
  SERVER mongo OPTIONS (collection 'objids');
EXPLAIN (VERBOSE, COSTS OFF) SELECT * FROM numbers WHERE id = 42;
SELECT * FROM numbers WHERE id = 42;
EXPLAIN (VERBOSE, COSTS OFF) SELECT * FROM numbers WHERE id IN (1, 2, 3000, 4000);
SELECT * FROM numbers WHERE id IN (1, 2, 3000, 4000) ORDER BY id;
-- the planner knows an _id lookup returns few rows
EXPLAIN (COSTS OFF) SELECT * FROM numbers a JOIN numbers b ON a.v = b.id WHERE a.id = 7;
-- one round trip for a lookup, several for a scan in batches
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT * FROM numbers WHERE id = 42;
ALTER FOREIGN TABLE numbers OPTIONS (ADD fetch_size '1000');
SET idxtable.enable_aggregate_pushdown = off;
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT count(*) FROM numbers;
RESET idxtable.enable_aggregate_pushdown;
-- ObjectId keys read as 24 hex digits and are found by them
SELECT * FROM objids ORDER BY id;
EXPLAIN (VERBOSE, COSTS OFF) SELECT k FROM objids WHERE id = '650000000000000000000003';
SELECT k FROM objids WHERE id = '650000000000000000000003';
SELECT k FROM objids WHERE id IN ('650000000000000000000001', '650000000000000000000005') ORDER BY k;
SELECT k FROM objids WHERE id = '650000000000000000000003 ';
SELECT k FROM objids WHERE id = '65000000000000000000000A';
SELECT k FROM objids WHERE id > '650000000000000000000003' COLLATE "C" ORDER BY k;
