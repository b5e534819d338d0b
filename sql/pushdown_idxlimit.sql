--
-- pushdown_idxlimit: LIMIT reaches index-table lookups and fact fetches.
-- A scan whose rows go straight to a LIMIT (one relation, the query's
-- order) reads a first lookup batch and fact fetch of as many entries as
-- the LIMIT asks rows (more when other clauses filter facts), then twice
-- as many each time.  EXPLAIN ANALYZE counts the entries read and facts
-- fetched.  Planning and EXPLAIN without ANALYZE never talk to MongoDB, so
-- they work while the server is down.
--
SET idxtable.index_consistency = 'any';
CREATE FOREIGN TABLE lim (id int OPTIONS (field '_id'), grp int, n int,
  note text) SERVER mongo_nostream OPTIONS (collection 'idxlimit_lim');
DELETE FROM lim;
-- 1500 facts per group; n is NULL for every hundredth (all in group 0)
INSERT INTO lim
  SELECT i, i % 2, CASE WHEN i % 100 = 0 THEN NULL ELSE i END, 'note ' || i
  FROM generate_series(1, 3000) i;
SELECT idxtable.create_index('lim', '{grp,n}', name => 'lim_grp_n');
SELECT idxtable.create_index('lim', '{n}', '{grp}', name => 'lim_n_grp');
ANALYZE lim;
-- ordered key-only scan after an equality prefix: 10 entries, 10 facts
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT * FROM lim WHERE grp = 1 ORDER BY n LIMIT 10;
-- without the pushdown: a whole batch (fetch_batch_size, 500) of each
SET idxtable.enable_order_pushdown = off;
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT * FROM lim WHERE grp = 1 ORDER BY n LIMIT 10;
RESET idxtable.enable_order_pushdown;
-- the whole index in order, key-only and covering; OFFSET rows count too
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT * FROM lim ORDER BY n LIMIT 10;
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT n, grp FROM lim ORDER BY n LIMIT 5 OFFSET 10;
-- another pushed clause filters facts: the first batch allows for its
-- selectivity (one fact in 1500 fails it here)
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT * FROM lim WHERE grp = 1 AND note <> 'note 3' ORDER BY n LIMIT 10;
-- one that filters more than estimated: the batches double (11, 22, 44)
-- until the rows are there
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT * FROM lim WHERE grp = 1 AND id > 100 ORDER BY n LIMIT 10;
-- no first batch where the LIMIT is not the scan's: a Sort on another
-- column, or a join
SET idxtable.enable_plain_scan = off;
EXPLAIN (COSTS OFF)
  SELECT * FROM lim WHERE grp = 1 ORDER BY note LIMIT 10;
EXPLAIN (COSTS OFF)
  SELECT * FROM lim l, generate_series(1, 2) g WHERE l.grp = 1
  ORDER BY l.n LIMIT 10;
RESET idxtable.enable_plain_scan;
-- every result is the plain scan's, in the same order, also where the
-- rows run into the NULL keys (read last) or past the first batches (the
-- routed side takes the index wherever it can)
SET idxtable.enable_plain_scan = off;
CREATE FUNCTION idxlimit_same_order(query text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  routed text;
  plain text;
BEGIN
  EXECUTE format('SELECT string_agg(t::text, '','') FROM (%s) t', query) INTO routed;
  SET LOCAL idxtable.enable_index_routing = off;
  EXECUTE format('SELECT string_agg(t::text, '','') FROM (%s) t', query) INTO plain;
  SET LOCAL idxtable.enable_index_routing = on;
  RETURN CASE WHEN routed IS NOT DISTINCT FROM plain THEN 'same order: ' ELSE 'DIFFERENT: ' END || query;
END $$;
SELECT idxlimit_same_order(q) FROM (VALUES
  ('SELECT id, n FROM lim WHERE grp = 1 ORDER BY n LIMIT 10'),
  ('SELECT id, n FROM lim ORDER BY n LIMIT 5 OFFSET 10'),
  ('SELECT n, grp FROM lim ORDER BY n LIMIT 5 OFFSET 2985'),
  -- the last rows of group 0 are its NULLs, in no defined order among them
  ('SELECT n FROM lim WHERE grp = 0 ORDER BY n LIMIT 10 OFFSET 1490'),
  ('SELECT id, n FROM lim WHERE grp = 1 AND id > 100 ORDER BY n LIMIT 10'),
  ('SELECT id, n FROM lim WHERE grp = 1 AND id > 2950 ORDER BY n LIMIT 30'),
  -- every NULL order, also across the NULL entries' boundary
  ('SELECT n FROM lim ORDER BY n DESC LIMIT 35'),
  ('SELECT n FROM lim ORDER BY n NULLS FIRST LIMIT 5 OFFSET 28'),
  ('SELECT n FROM lim ORDER BY n DESC NULLS LAST LIMIT 5 OFFSET 2968'),
  ('SELECT n FROM lim WHERE grp = 0 ORDER BY n DESC LIMIT 5 OFFSET 28'),
  ('SELECT grp, n FROM lim ORDER BY grp DESC, n DESC NULLS LAST LIMIT 40'),
  ('SELECT grp, n FROM lim ORDER BY grp NULLS FIRST, n NULLS FIRST LIMIT 40'),
  ('SELECT id, n FROM lim WHERE n IS NULL OR n > 2990 ORDER BY id'),
  ('SELECT n FROM lim WHERE grp = 0 AND (n IS NULL OR n < 50) ORDER BY n DESC LIMIT 30'),
  ('SELECT n FROM lim WHERE n IS NULL OR n BETWEEN 10 AND 20 ORDER BY n NULLS FIRST LIMIT 35')
) AS v(q);
RESET idxtable.enable_plain_scan;
DROP FUNCTION idxlimit_same_order(text);
--
-- NULL keys in every order.  MongoDB sorts null below every other value:
-- first ascending, last descending.  Where the query places NULLs there,
-- one lookup sorted both ways reads them in place; elsewhere the NULL
-- entries come from a find of their own ({"_id.k0": {"$eq": null}}),
-- before or after that of the others ({"$ne": null}, which mongod turns
-- into index bounds that leave the NULL keys out), each limited by the
-- first batch.  The counts below stay at the LIMIT (+ OFFSET), however
-- many NULL keys there are.
--
-- NULLs first descending: their find first, 3 of its entries
EXPLAIN (ANALYZE, VERBOSE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT id, n FROM lim ORDER BY n DESC LIMIT 3;
-- then the other find, past the 30 NULL keys
EXPLAIN (ANALYZE, VERBOSE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT id, n FROM lim ORDER BY n DESC LIMIT 3 OFFSET 29;
-- MongoDB's own places: one find, no filter
EXPLAIN (ANALYZE, VERBOSE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT id, n FROM lim ORDER BY n NULLS FIRST LIMIT 3 OFFSET 29;
EXPLAIN (ANALYZE, VERBOSE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT id, n FROM lim ORDER BY n DESC NULLS LAST LIMIT 3;
-- two keys of {grp, n}: the second must place NULLs as MongoDB does, in
-- the first's direction; the first's NULLs go either way
EXPLAIN (VERBOSE, COSTS OFF)
  SELECT grp, n FROM lim ORDER BY grp DESC, n DESC NULLS LAST LIMIT 3;
EXPLAIN (VERBOSE, COSTS OFF)
  SELECT grp, n FROM lim ORDER BY grp, n NULLS FIRST LIMIT 3;
-- a second key whose NULLs MongoDB places otherwise: only the first key
-- comes from the index (an Incremental Sort does the rest)
SET idxtable.enable_plain_scan = off;
EXPLAIN (COSTS OFF)
  SELECT grp, n FROM lim ORDER BY grp, n LIMIT 3;
EXPLAIN (COSTS OFF)
  SELECT grp, n FROM lim ORDER BY grp, n DESC LIMIT 3;
--
-- IS NULL, and "key IS NULL OR <range>" on the key after the equality
-- prefix: the NULL entries and the range's come from two finds (in the
-- order's NULL place when ordered)
--
-- rare NULLs (1%): IS NULL is cheaper through the index table
RESET idxtable.enable_plain_scan;
EXPLAIN (COSTS OFF) SELECT * FROM lim WHERE n IS NULL;
SELECT count(*), count(n), sum(id) FROM lim WHERE n IS NULL;
-- covering, and key-only
EXPLAIN (ANALYZE, VERBOSE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT n, grp FROM lim WHERE n IS NULL OR n > 2990;
SET idxtable.enable_plain_scan = off;
EXPLAIN (ANALYZE, VERBOSE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT * FROM lim WHERE n > 2990 OR n IS NULL;
-- an equality prefix, an equality or both bounds in the range, an order
EXPLAIN (ANALYZE, VERBOSE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT id, n FROM lim WHERE grp = 0 AND (n IS NULL OR n BETWEEN 10 AND 60)
  ORDER BY n DESC NULLS LAST LIMIT 5;
EXPLAIN (COSTS OFF) SELECT * FROM lim WHERE n IS NULL OR n = 5;
-- an IN list on the order key leaves NULLs out: one find
EXPLAIN (ANALYZE, VERBOSE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT n FROM lim WHERE n IN (5, 7, 2999) ORDER BY n DESC LIMIT 2;
-- not matched: a NULL test on another key, two ranges, IS NOT NULL
EXPLAIN (COSTS OFF) SELECT * FROM lim WHERE n IS NULL OR grp > 0;
EXPLAIN (COSTS OFF) SELECT * FROM lim WHERE n IS NULL OR n < 5 OR n > 2990;
EXPLAIN (COSTS OFF) SELECT * FROM lim WHERE n IS NOT NULL OR n > 5;
-- a parameterized scan opens its finds again for each outer row (the
-- second while fetching a row: what it keeps for EXPLAIN outlives that)
SET enable_hashjoin = off;
SET enable_mergejoin = off;
CREATE TEMP TABLE lim_outer (x int);
INSERT INTO lim_outer VALUES (2995), (NULL), (2990);
EXPLAIN (ANALYZE, VERBOSE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT o.x, l.id FROM lim_outer o JOIN lim l ON (l.n IS NULL OR l.n > o.x);
SELECT o.x, count(*), count(l.n), sum(l.id)
  FROM lim_outer o JOIN lim l ON (l.n IS NULL OR l.n > o.x)
  GROUP BY o.x ORDER BY o.x;
RESET enable_hashjoin;
RESET enable_mergejoin;
DROP TABLE lim_outer;
-- a generic plan whose range compares with a NULL: still the NULL entries
SET plan_cache_mode = force_generic_plan;
SET idxtable.enable_aggregate_pushdown = off;
PREPARE nulls_or(int) AS
  SELECT count(*), count(n), min(n) FROM lim WHERE n IS NULL OR n > $1;
EXPLAIN (COSTS OFF) EXECUTE nulls_or(NULL);
EXECUTE nulls_or(NULL);
EXECUTE nulls_or(2990);
DEALLOCATE nulls_or;
RESET idxtable.enable_aggregate_pushdown;
RESET plan_cache_mode;
RESET idxtable.enable_plain_scan;
-- a multi-valued key has no entry for a NULL or empty array, nor for a
-- NULL element: its NULLs are never read from the index table, and the
-- other keys' only where an element is looked up (the rows that have it)
CREATE FOREIGN TABLE lim_tags (id int OPTIONS (field '_id'), tags text[],
  n int) SERVER mongo_nostream OPTIONS (collection 'idxlimit_tags');
DELETE FROM lim_tags;
INSERT INTO lim_tags VALUES (1, NULL, NULL), (2, '{}', NULL), (3, '{a}', NULL),
  (4, '{a,b}', 4), (5, '{b,NULL}', NULL), (6, '{a}', 6), (7, NULL, 7);
SELECT idxtable.create_index('lim_tags', '{tags,n}', name => 'lim_tags_n');
SET idxtable.enable_plain_scan = off;
EXPLAIN (COSTS OFF) SELECT id FROM lim_tags WHERE tags IS NULL;
EXPLAIN (COSTS OFF) SELECT id FROM lim_tags WHERE n IS NULL;
EXPLAIN (COSTS OFF)
  SELECT id, n FROM lim_tags WHERE 'a' = ANY (tags) AND (n IS NULL OR n > 5)
  ORDER BY n DESC;
SELECT id, n FROM lim_tags WHERE 'a' = ANY (tags) AND (n IS NULL OR n > 5)
  ORDER BY n DESC;
SELECT id FROM lim_tags WHERE 'b' = ANY (tags) AND n IS NULL;
RESET idxtable.enable_plain_scan;
SELECT idxtable.drop_index('lim_tags_n');
DROP FOREIGN TABLE lim_tags;
-- an index whose collection turns out not to be its own when a scan
-- reads its ownership marker (planning reads none): an unordered scan
-- reads the facts instead, an ordered one fails once and drops the cached
-- plans, which are made without the index from then on
CREATE FOREIGN TABLE lim_owners (_id text, system text, database_oid bigint,
  database text, definition text)
  SERVER mongo_nostream OPTIONS (collection 'idxtable.owners');
SELECT system, database_oid, database, definition FROM lim_owners
  WHERE _id = 'idxtable.idxlimit_lim.lim_n_grp' \gset mine_
UPDATE lim_owners SET system = '1234567890123456789', database_oid = 99,
  database = 'otherdb', definition = '11111111-2222-3333-4444-555555555555'
  WHERE _id = 'idxtable.idxlimit_lim.lim_n_grp';
\c
SET idxtable.index_consistency = 'any';
SET idxtable.enable_plain_scan = off;
SET plan_cache_mode = force_generic_plan;
PREPARE first_n AS SELECT n FROM lim ORDER BY n LIMIT 3;
EXPLAIN (COSTS OFF) EXECUTE first_n;
SELECT split_part(show_error('EXECUTE first_n'), E'\n', 1);
EXECUTE first_n;
EXPLAIN (COSTS OFF) EXECUTE first_n;
DEALLOCATE first_n;
\c
SET idxtable.index_consistency = 'any';
SET idxtable.enable_plain_scan = off;
EXPLAIN (COSTS OFF) SELECT n, grp FROM lim WHERE n = 5;
SELECT n, grp FROM lim WHERE n = 5;
UPDATE lim_owners SET system = :'mine_system',
  database_oid = :mine_database_oid, database = :'mine_database',
  definition = :'mine_definition'
  WHERE _id = 'idxtable.idxlimit_lim.lim_n_grp';
DROP FOREIGN TABLE lim_owners;
SELECT idxtable.drop_index('lim_grp_n');
SELECT idxtable.drop_index('lim_n_grp');
--
-- the server is down: planning and EXPLAIN need it not, execution does
--
\set server lim_down
\set mongo_database idxtable_regress
\set server_options ', change_streams \'off\''
\i test/fixtures/server.sql
CREATE FOREIGN TABLE lim_down (id int OPTIONS (field '_id'), grp int, n int,
  note text) SERVER lim_down OPTIONS (collection 'idxlimit_lim');
SELECT idxtable.create_index('lim_down', '{n}', '{grp}', name => 'lim_down_n');
ALTER SERVER lim_down OPTIONS (SET uri 'mongodb://127.0.0.1:1/',
  ADD server_selection_timeout_ms '300', ADD connect_timeout_ms '300');
-- a new session: no client, no ownership marker read yet
\c
SET idxtable.index_consistency = 'any';
EXPLAIN (COSTS OFF) SELECT n, grp FROM lim_down WHERE n = 5;
EXPLAIN (COSTS OFF) SELECT n, grp FROM lim_down ORDER BY n LIMIT 3;
SET idxtable.enable_plain_scan = off;
EXPLAIN (VERBOSE, COSTS OFF) SELECT * FROM lim_down WHERE n = 5;
RESET idxtable.enable_plain_scan;
EXPLAIN (COSTS OFF) SELECT * FROM lim_down WHERE note = 'x';
SELECT split_part(show_error('SELECT n FROM lim_down WHERE n = 5'), E'\n', 1);
SELECT split_part(show_error('SELECT * FROM lim_down WHERE note = ''x'''), E'\n', 1);
ALTER SERVER lim_down OPTIONS (SET uri :'mongo_uri',
  DROP server_selection_timeout_ms, DROP connect_timeout_ms);
SELECT n, grp FROM lim_down WHERE n = 5;
SELECT idxtable.drop_index('lim_down_n');
DROP FOREIGN TABLE lim_down;
DROP SERVER lim_down CASCADE;
DROP FOREIGN TABLE lim;
