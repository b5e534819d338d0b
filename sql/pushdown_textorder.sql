--
-- pushdown_textorder: ORDER BY, LIMIT, OFFSET and ranges on text columns
-- that hold strings and ObjectIds, under collations that order as bytes:
-- two finds (strings, ObjectIds) merged as bytes, a find for other types
-- and one for NULLs; results equal to a local copy's
--
CREATE FOREIGN TABLE tmix (id text OPTIONS (field '_id') COLLATE "C", n int,
  t text COLLATE "C")
  SERVER mongo OPTIONS (database 'idxtable_order', collection 'tmix');
CREATE FOREIGN TABLE tstr (id text OPTIONS (field '_id') COLLATE "C", n int,
  t text COLLATE "C")
  SERVER mongo OPTIONS (database 'idxtable_order', collection 'tstr');
CREATE FOREIGN TABLE toid (id text OPTIONS (field '_id') COLLATE "C", n int,
  t text COLLATE "C")
  SERVER mongo OPTIONS (database 'idxtable_order', collection 'toid');
CREATE FOREIGN TABLE tbad (id text OPTIONS (field '_id') COLLATE "C", n int)
  SERVER mongo OPTIONS (database 'idxtable_order', collection 'tbad');
CREATE TABLE tmix_local AS SELECT * FROM tmix;
CREATE TABLE tstr_local AS SELECT * FROM tstr;
CREATE TABLE toid_local AS SELECT * FROM toid;
SELECT id, n, t FROM tmix_local ORDER BY id;
-- the sort, the limit and the ranges are pushed: two finds merged as bytes
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM tmix ORDER BY id LIMIT 3;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM tmix ORDER BY id DESC LIMIT 5 OFFSET 2;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM tmix WHERE id > '65' ORDER BY id LIMIT 4;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM tmix WHERE n > 3 ORDER BY id LIMIT 4;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM tmix WHERE id >= 'A' AND id < 'g' LIMIT 4;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id, t FROM tmix ORDER BY t DESC NULLS LAST LIMIT 4;
EXPLAIN (ANALYZE, VERBOSE, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT id FROM tmix WHERE id > '650000000000000000000001' ORDER BY id LIMIT 3;
-- not pushed: a collation that does not order as bytes, a second key
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM tmix ORDER BY id COLLATE "en-x-icu" LIMIT 3;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM tmix WHERE id COLLATE "en-x-icu" > 'a' LIMIT 3;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM tmix ORDER BY id, n LIMIT 3;
-- each returns what the local copy returns, in its order
CREATE FUNCTION check_text(q text, t text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  remote text;
  local text;
BEGIN
  EXECUTE format('SELECT string_agg(r::text, '' '') FROM (%s) r', format(q, t)) INTO remote;
  EXECUTE format('SELECT string_agg(r::text, '' '') FROM (%s) r', format(q, t || '_local')) INTO local;
  IF remote IS DISTINCT FROM local THEN
    RETURN format('MISMATCH %s on %s: remote %s local %s', q, t, remote, local);
  END IF;
  RETURN format('%s: %s', q, coalesce(remote, '(none)'));
END $$;
SELECT check_text(q, t) FROM (VALUES ('tmix'), ('tstr'), ('toid')) tables(t),
  unnest(ARRAY[
  'SELECT id FROM %I ORDER BY id',
  'SELECT id FROM %I ORDER BY id LIMIT 4',
  'SELECT id FROM %I ORDER BY id DESC LIMIT 5 OFFSET 2',
  'SELECT id FROM %I ORDER BY id LIMIT 3 OFFSET 30',
  'SELECT id FROM %I WHERE n %% 3 = 0 ORDER BY id LIMIT 7',
  'SELECT id FROM %I WHERE id > ''65'' ORDER BY id LIMIT 4',
  'SELECT id FROM %I WHERE id > ''650000000000000000000001'' ORDER BY id LIMIT 3',
  'SELECT id FROM %I WHERE id >= ''650000000000000000000001'' ORDER BY id LIMIT 3',
  'SELECT id FROM %I WHERE id > ''65000000000000000000000'' ORDER BY id',
  'SELECT id FROM %I WHERE id < ''6500000000000000000000010'' ORDER BY id DESC LIMIT 4',
  'SELECT id FROM %I WHERE id <= ''5F'' ORDER BY id DESC LIMIT 6',
  'SELECT id FROM %I WHERE id > ''g'' ORDER BY id',
  'SELECT id FROM %I WHERE id > ''ffffffffffffffffffffffff'' ORDER BY id',
  'SELECT id FROM %I WHERE id >= ''A'' AND id < ''f'' ORDER BY id',
  'SELECT id FROM %I WHERE NOT (id > ''a'') ORDER BY id DESC',
  'SELECT id FROM %I WHERE id > ''5'' OR n = 1 ORDER BY id LIMIT 6',
  'SELECT t FROM %I ORDER BY t LIMIT 8',
  'SELECT t FROM %I ORDER BY t DESC LIMIT 8',
  'SELECT t FROM %I ORDER BY t NULLS FIRST LIMIT 8 OFFSET 2',
  'SELECT t FROM %I WHERE t > ''6'' ORDER BY t DESC NULLS LAST',
  'SELECT count(*) FROM %I WHERE id BETWEEN ''0'' AND ''650000000000000000000002''',
  'SELECT id FROM %I ORDER BY id COLLATE "en-x-icu" LIMIT 5']) q;
-- a key of another type fails as in a plain scan
SELECT id FROM tbad ORDER BY id LIMIT 2;
SELECT id FROM tbad LIMIT 100;
CREATE FOREIGN TABLE tarr (id text OPTIONS (field '_id') COLLATE "C", n int,
  t text COLLATE "C")
  SERVER mongo OPTIONS (database 'idxtable_order', collection 'tarr');
SELECT t FROM tarr ORDER BY t LIMIT 2;
SELECT t FROM tarr LIMIT 100;
-- a prepared keyset page
PREPARE page(text) AS SELECT id FROM tmix WHERE id > $1 ORDER BY id LIMIT 3;
EXECUTE page('');
EXECUTE page('650000000000000000000000');
EXECUTE page('a');
DEALLOCATE page;
-- a generic plan: the range with a parameter is rechecked, the sort pushed
-- (no local sort), the LIMIT kept local; EXPLAIN shows the parameter as a
-- placeholder in the finds
SET plan_cache_mode = force_generic_plan;
SET enable_sort = off;
PREPARE gpage(text) AS SELECT id FROM tmix WHERE id > $1 ORDER BY id LIMIT 3;
EXPLAIN (ANALYZE, VERBOSE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE gpage('650000000000000000000000');
EXECUTE gpage('650000000000000000000000');
DEALLOCATE gpage;
RESET enable_sort;
RESET plan_cache_mode;
