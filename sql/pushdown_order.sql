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
-- text under a collation that orders as bytes: strings and ObjectIds read by
-- a find each and merged (pushdown_textorder)
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM ordr ORDER BY t LIMIT 3;
-- not pushed: three keys, NULLs of a second key where MongoDB does not put
-- them, an expression, a local condition, a LIMIT not known when planning
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
CREATE FUNCTION check_order(q text, t text DEFAULT 'ordr') RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  remote text;
  local text;
BEGIN
  EXECUTE format('SELECT string_agg(r::text, '' '') FROM (%s) r', format(q, t)) INTO remote;
  EXECUTE format('SELECT string_agg(r::text, '' '') FROM (%s) r', format(q, t || '_local')) INTO local;
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
-- float keys: MongoDB sorts NaN below every number, PostgreSQL above, so
-- the NaNs of a float first key are read by a find of their own, after the
-- numbers ascending and before them descending; -0 and 0 are equal in both
-- (f + 0 prints either as 0, ties being in no defined order), int32/int64
-- values read exactly (or not at all)
CREATE FOREIGN TABLE flo (id int OPTIONS (field '_id'), f float8, e real OPTIONS (field 'r'), k int)
  SERVER mongo OPTIONS (database 'idxtable_order', collection 'flo');
CREATE TABLE flo_local AS SELECT * FROM flo;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id, f FROM flo ORDER BY f LIMIT 5;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id, e FROM flo ORDER BY e DESC, k NULLS FIRST LIMIT 5 OFFSET 2;
-- not pushed: a float second key (its NaNs would sort below its numbers)
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM flo ORDER BY k, f LIMIT 3;
SET idxtable.enable_order_pushdown = off;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id, f FROM flo ORDER BY f LIMIT 5;
RESET idxtable.enable_order_pushdown;
SELECT check_order(q, 'flo') FROM (VALUES
  ('SELECT f + 0 FROM %s ORDER BY f'), ('SELECT f + 0 FROM %s ORDER BY f DESC'),
  ('SELECT f + 0 FROM %s ORDER BY f NULLS FIRST'), ('SELECT f + 0 FROM %s ORDER BY f DESC NULLS LAST'),
  ('SELECT e + 0 FROM %s ORDER BY e'), ('SELECT e + 0 FROM %s ORDER BY e DESC'),
  ('SELECT f, k FROM %s ORDER BY f, k NULLS FIRST'), ('SELECT f, k FROM %s ORDER BY f DESC, k DESC NULLS LAST'),
  ('SELECT e, id FROM %s ORDER BY e NULLS FIRST, id'), ('SELECT e, k FROM %s ORDER BY e DESC NULLS LAST, k NULLS FIRST'),
  ('SELECT f + 0 FROM %s ORDER BY f LIMIT 10'), ('SELECT f + 0 FROM %s ORDER BY f LIMIT 3 OFFSET 9'),
  ('SELECT f + 0 FROM %s ORDER BY f LIMIT 2 OFFSET 11'), ('SELECT f + 0 FROM %s ORDER BY f OFFSET 12'),
  ('SELECT f + 0 FROM %s ORDER BY f DESC LIMIT 4'), ('SELECT f + 0 FROM %s ORDER BY f DESC LIMIT 2 OFFSET 3'),
  ('SELECT f + 0 FROM %s ORDER BY f DESC NULLS LAST LIMIT 3'), ('SELECT f + 0 FROM %s ORDER BY f DESC NULLS LAST LIMIT 4 OFFSET 10'),
  ('SELECT f + 0 FROM %s ORDER BY f NULLS FIRST LIMIT 3 OFFSET 3'), ('SELECT f + 0 FROM %s ORDER BY f NULLS FIRST LIMIT 3 OFFSET 12'),
  ('SELECT f, k FROM %s ORDER BY f, k NULLS FIRST LIMIT 3 OFFSET 10'), ('SELECT f, k FROM %s ORDER BY f DESC, k DESC NULLS LAST LIMIT 5'),
  ('SELECT e, k FROM %s ORDER BY e, k NULLS FIRST LIMIT 4 OFFSET 9'), ('SELECT e + 0 FROM %s ORDER BY e LIMIT 0'),
  ('SELECT f + 0 FROM %s WHERE f > 0 ORDER BY f LIMIT 5'), ('SELECT f + 0 FROM %s WHERE f < 1 ORDER BY f DESC LIMIT 5'),
  ('SELECT f + 0 FROM %s WHERE k > 1 ORDER BY f LIMIT 4 OFFSET 1'),
  ('SELECT f, id FROM %s ORDER BY f, id NULLS FIRST'), ('SELECT e, id FROM %s ORDER BY e DESC, id NULLS LAST LIMIT 9')
) AS v(q);
-- the parts read only what LIMIT needs: the numbers alone, then the NaNs
-- and NULLs when the numbers do not fill it
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT id FROM flo ORDER BY f LIMIT 3;
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT id FROM flo ORDER BY f LIMIT 3 OFFSET 8;
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT id FROM flo ORDER BY f DESC LIMIT 4;
-- a sorted LIMIT reads the rows it returns and no more: one find when the
-- non-NULL keys suffice, a second for the NULL ones otherwise
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT id FROM ordr ORDER BY k LIMIT 3;
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT id FROM ordr ORDER BY k LIMIT 2 OFFSET 6;
CREATE FOREIGN TABLE numbers_o (id int OPTIONS (field '_id'), v int, label text)
  SERVER mongo OPTIONS (collection 'numbers');
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT id, label FROM numbers_o ORDER BY id LIMIT 10;
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT * FROM numbers_o LIMIT 5 OFFSET 10;
SELECT id FROM numbers_o ORDER BY id DESC LIMIT 3;
-- a rescan runs the finds again from the start
SELECT o.id, (SELECT array_agg(x.id) FROM (SELECT id FROM ordr WHERE g > o.id ORDER BY id LIMIT 2) x)
  FROM ordr o WHERE o.id < 4 ORDER BY o.id;
DROP FUNCTION check_order(text, text);
DROP TABLE ordr_local, flo_local;
DROP FOREIGN TABLE ordr, numbers_o, flo;
