--
-- pushdown_order: ORDER BY pushed as the find's sort, LIMIT and OFFSET as
-- its limit and skip, with results equal to a local copy's, NULLs (null,
-- missing, undefined) placed as PostgreSQL places them
--
CREATE FOREIGN TABLE ordr (id int OPTIONS (field '_id'), k int, g int8,
  b boolean, d timestamptz, t text)
  SERVER mongo OPTIONS (database 'idxtable_order', collection 'ordr');
CREATE TABLE ordr_local AS SELECT * FROM ordr;
SELECT * FROM ordr ORDER BY id;
-- without LIMIT a small table's sort stays local (the second find costs
-- more than sorting); with one, the sort of the non-NULL keys is pushed and
-- the NULL keys are read by a second find
EXPLAIN (VERBOSE, COSTS OFF) SELECT id, k FROM ordr ORDER BY k;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id, k FROM ordr ORDER BY k DESC, g NULLS FIRST LIMIT 5;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM ordr WHERE g > 1 ORDER BY b NULLS FIRST, id DESC NULLS LAST LIMIT 5;
-- LIMIT and OFFSET go to the find when nothing is filtered locally
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM ordr ORDER BY id LIMIT 3;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id, k + 1 FROM ordr WHERE g >= 1 LIMIT 2 OFFSET 3;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM ordr ORDER BY d DESC LIMIT 2 OFFSET 1;
-- not pushed: text, three keys, NULLs of a second key where MongoDB does not
-- put them, an expression, a local condition, a LIMIT not known when planning
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM ordr ORDER BY t LIMIT 3;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM ordr ORDER BY k, g NULLS FIRST, id LIMIT 3;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM ordr ORDER BY k, g LIMIT 3;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM ordr ORDER BY k + 1 LIMIT 3;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM ordr WHERE id % 2 = 0 LIMIT 2;
PREPARE lim(int8) AS SELECT id FROM ordr ORDER BY id LIMIT $1;
EXPLAIN (VERBOSE, COSTS OFF) EXECUTE lim(2);
DEALLOCATE lim;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM ordr ORDER BY id FETCH FIRST 2 ROWS WITH TIES;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM ordr ORDER BY id LIMIT 2 FOR UPDATE;
-- the switch
SET idxtable.enable_order_pushdown = off;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM ordr ORDER BY id LIMIT 3;
RESET idxtable.enable_order_pushdown;
-- each of these returns what the local copy returns, in its order (the
-- queries' output is the sort keys, ties being in no defined order)
CREATE FUNCTION check_order(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  remote text;
  local text;
BEGIN
  EXECUTE format('SELECT string_agg(r::text, '' '') FROM (%s) r', format(q, 'ordr')) INTO remote;
  EXECUTE format('SELECT string_agg(r::text, '' '') FROM (%s) r', format(q, 'ordr_local')) INTO local;
  IF remote IS DISTINCT FROM local THEN
    RETURN format('MISMATCH %s: remote %s local %s', q, remote, local);
  END IF;
  RETURN format('%s: %s', q, coalesce(remote, '(none)'));
END $$;
SELECT check_order(q) FROM (VALUES
  ('SELECT k FROM %s ORDER BY k'), ('SELECT k FROM %s ORDER BY k DESC'),
  ('SELECT k FROM %s ORDER BY k NULLS FIRST'), ('SELECT k FROM %s ORDER BY k DESC NULLS LAST'),
  ('SELECT k, g FROM %s ORDER BY k, g DESC'), ('SELECT k, g FROM %s ORDER BY k DESC, g'),
  ('SELECT k, g FROM %s ORDER BY k NULLS FIRST, g'), ('SELECT k, g FROM %s ORDER BY k, g NULLS FIRST LIMIT 9'),
  ('SELECT k, g FROM %s ORDER BY k DESC, g DESC NULLS LAST LIMIT 6'), ('SELECT b, g FROM %s ORDER BY b NULLS FIRST, g NULLS FIRST LIMIT 8 OFFSET 1'), ('SELECT b, id FROM %s ORDER BY b, id'),
  ('SELECT b, id FROM %s ORDER BY b DESC, id DESC NULLS LAST'), ('SELECT d FROM %s ORDER BY d'),
  ('SELECT id FROM %s ORDER BY id LIMIT 3'), ('SELECT id FROM %s ORDER BY id DESC LIMIT 3 OFFSET 2'),
  ('SELECT id FROM %s ORDER BY id OFFSET 8'), ('SELECT id FROM %s ORDER BY id LIMIT 0'),
  ('SELECT id FROM %s ORDER BY id LIMIT NULL OFFSET 9'), ('SELECT k FROM %s ORDER BY k LIMIT 7'),
  ('SELECT k FROM %s ORDER BY k LIMIT 3 OFFSET 6'), ('SELECT k FROM %s ORDER BY k OFFSET 9'),
  ('SELECT k FROM %s ORDER BY k NULLS FIRST LIMIT 4 OFFSET 2'),
  ('SELECT k, g FROM %s WHERE g > 0 ORDER BY k DESC, g LIMIT 4'),
  ('SELECT count(*) FROM (SELECT id FROM %s LIMIT 4 OFFSET 3) s'),
  ('SELECT count(*) FROM (SELECT id FROM %s WHERE k IS NOT NULL LIMIT 20 OFFSET 2) s'),
  ('SELECT count(*) FROM (SELECT id FROM %s OFFSET 12) s'),
  ('SELECT d FROM %s WHERE d IS NOT NULL ORDER BY d DESC LIMIT 1 OFFSET 1')
) AS v(q);
-- a sorted LIMIT reads the rows it returns and no more: one find when the
-- non-NULL keys suffice, a second for the NULL ones otherwise
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT id FROM ordr ORDER BY k LIMIT 3;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT id FROM ordr ORDER BY k LIMIT 2 OFFSET 6;
CREATE FOREIGN TABLE numbers_o (id int OPTIONS (field '_id'), v int, label text)
  SERVER mongo OPTIONS (collection 'numbers');
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT id, label FROM numbers_o ORDER BY id LIMIT 10;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT * FROM numbers_o LIMIT 5 OFFSET 10;
SELECT id FROM numbers_o ORDER BY id DESC LIMIT 3;
-- a rescan runs the finds again from the start
SELECT o.id, (SELECT array_agg(x.id) FROM (SELECT id FROM ordr WHERE g > o.id ORDER BY id LIMIT 2) x)
  FROM ordr o WHERE o.id < 4 ORDER BY o.id;
DROP FUNCTION check_order(text);
DROP TABLE ordr_local;
DROP FOREIGN TABLE ordr, numbers_o;
