--
-- pushdown_agg: count, sum, avg, min, max, GROUP BY and HAVING run as a
-- MongoDB aggregate pipeline, with PostgreSQL's results
--
CREATE FOREIGN TABLE agg_t (
  id int OPTIONS (field '_id'), town text, n int, b bigint, s smallint,
  d date, f float8
) SERVER mongo OPTIONS (collection 'agg_t');
DELETE FROM agg_t;
INSERT INTO agg_t VALUES
  (1, 'Redmond', 10, 9223372036854775807, 1, '2020-01-01', 1.5),
  (2, 'Redmond', 20, 9223372036854775807, 2, '2021-06-01', 'NaN'),
  (3, 'Seattle', NULL, NULL, NULL, NULL, NULL),
  (4, NULL, 2147483647, -5, 3, '2019-03-03', 2),
  (5, NULL, 2147483647, NULL, 4, NULL, -1),
  (6, 'Seattle', 7, 1, 5, '2022-02-02', 0);
CREATE TABLE agg_local AS SELECT * FROM agg_t;
-- every aggregate and the grouping are pushed: the pipeline shows them
EXPLAIN (VERBOSE, COSTS OFF) SELECT count(*) FROM agg_t;
EXPLAIN (VERBOSE, COSTS OFF)
  SELECT town, d, count(*), count(n), sum(n), avg(n), min(n), max(b)
  FROM agg_t WHERE id > 1 GROUP BY town, d;
-- HAVING and expressions over groups and aggregates are computed locally
-- on the groups the pipeline returns; constants stay in the target list
EXPLAIN (VERBOSE, COSTS OFF)
  SELECT 'x', town, count(*) + 1 FROM agg_t GROUP BY town HAVING sum(n) > 20;
-- not pushed: float sums (NaN), text min/max under a non-C collation, dates,
-- DISTINCT, FILTER, ORDER BY in the aggregate, a local condition
EXPLAIN (VERBOSE, COSTS OFF) SELECT sum(f) FROM agg_t;
EXPLAIN (VERBOSE, COSTS OFF) SELECT min(town) FROM agg_t;
-- a date column reads only midnights, which MongoDB cannot check; a dotted
-- path may cross an array
EXPLAIN (VERBOSE, COSTS OFF) SELECT min(d), count(d) FROM agg_t;
EXPLAIN (VERBOSE, COSTS OFF) SELECT count(DISTINCT f) FROM agg_t;
EXPLAIN (VERBOSE, COSTS OFF) SELECT count(*) FILTER (WHERE n > 1) FROM agg_t;
EXPLAIN (VERBOSE, COSTS OFF) SELECT count(*) FROM agg_t WHERE lower(town) = 'x';
-- count(DISTINCT col): a $group by the groups and the value, then a count
-- of the non-null values (and count(*) as a sum of the first stage's counts)
EXPLAIN (VERBOSE, COSTS OFF) SELECT count(DISTINCT n) FROM agg_t;
EXPLAIN (VERBOSE, COSTS OFF)
  SELECT town, count(DISTINCT n), count(*), count(DISTINCT n) + 1
  FROM agg_t WHERE id > 1 GROUP BY town;
-- not pushed: DISTINCT of floats (-0 and 0, NaN), of dates, of text under a
-- nondeterministic collation, of another column or beside another aggregate
CREATE COLLATION agg_ci (provider = icu, locale = 'und-u-ks-level2',
                         deterministic = false);
EXPLAIN (VERBOSE, COSTS OFF) SELECT count(DISTINCT d) FROM agg_t;
EXPLAIN (VERBOSE, COSTS OFF) SELECT count(DISTINCT town COLLATE agg_ci) FROM agg_t;
EXPLAIN (VERBOSE, COSTS OFF) SELECT count(DISTINCT n), count(DISTINCT s) FROM agg_t;
EXPLAIN (VERBOSE, COSTS OFF) SELECT count(DISTINCT n), sum(n) FROM agg_t;
EXPLAIN (VERBOSE, COSTS OFF) SELECT sum(DISTINCT n) FROM agg_t;
-- the switch
SET idxtable.enable_aggregate_pushdown = off;
EXPLAIN (VERBOSE, COSTS OFF) SELECT count(*) FROM agg_t;
EXPLAIN (VERBOSE, COSTS OFF) SELECT count(DISTINCT n) FROM agg_t;
RESET idxtable.enable_aggregate_pushdown;
-- results equal the local table's, pushed or not
-- the rows of a grouping with LIMIT l OFFSET o (no ORDER BY: any groups),
-- planned with the constants, so pushed
CREATE FUNCTION agg_lim_rows(l int, o int)
  RETURNS TABLE (town text, n int, c bigint, sb numeric) LANGUAGE plpgsql AS $$
BEGIN
  RETURN QUERY EXECUTE format('SELECT town, n, count(*), sum(b) FROM agg_t '
                              'GROUP BY town, n LIMIT %s OFFSET %s', l, o);
END $$;
CREATE FUNCTION agg_same(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  remote text;
  local text;
  plan text;
BEGIN
  EXECUTE 'EXPLAIN (VERBOSE, COSTS OFF) ' || q INTO plan;
  EXECUTE format('SELECT string_agg(r::text, '' '' ORDER BY r::text) FROM (%s) r', q)
    INTO remote;
  EXECUTE format('SELECT string_agg(r::text, '' '' ORDER BY r::text) FROM (%s) r',
                 replace(q, 'agg_t', 'agg_local')) INTO local;
  IF remote IS DISTINCT FROM local THEN
    RETURN format('MISMATCH %s: remote %s local %s', q, remote, local);
  END IF;
  RETURN format('%s%s: %s', CASE WHEN plan LIKE '%Aggregate%' THEN '' ELSE 'pushed ' END,
                q, coalesce(remote, '(none)'));
END $$;
-- the same for query q over foreign table tbl (written agg_t in q) and its
-- local copy tbl_local
CREATE FUNCTION agg_same(q text, tbl text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  remote text;
  local text;
  plan text;
BEGIN
  EXECUTE 'EXPLAIN (VERBOSE, COSTS OFF) ' || replace(q, 'agg_t', tbl) INTO plan;
  EXECUTE format('SELECT string_agg(r::text, '' '' ORDER BY r::text) FROM (%s) r',
                 replace(q, 'agg_t', tbl)) INTO remote;
  EXECUTE format('SELECT string_agg(r::text, '' '' ORDER BY r::text) FROM (%s) r',
                 replace(q, 'agg_t', tbl || '_local')) INTO local;
  IF remote IS DISTINCT FROM local THEN
    RETURN format('MISMATCH %s: remote %s local %s', q, remote, local);
  END IF;
  RETURN format('%s%s: %s', CASE WHEN plan LIKE '%Aggregate%' THEN '' ELSE 'pushed ' END,
                replace(q, 'agg_t', tbl), coalesce(remote, '(none)'));
END $$;
SELECT agg_same(q) FROM (VALUES
  ('SELECT count(*), count(n), count(town), count(d) FROM agg_t'),
  -- over no rows: count 0, the others NULL; grouped: no row
  ('SELECT count(*), count(n), sum(n), avg(n), min(n), max(d), sum(b), avg(s) FROM agg_t WHERE id > 100'),
  ('SELECT town, count(*), sum(n) FROM agg_t WHERE id > 100 GROUP BY town'),
  -- only NULLs: sum and avg NULL, count 0
  ('SELECT sum(n), avg(b), min(n), max(s), count(n) FROM agg_t WHERE id = 3'),
  -- int4 sums past int4, int8 sums past int8: int8 and exact numeric
  ('SELECT sum(n), avg(n), sum(b), avg(b), sum(s), avg(s) FROM agg_t'),
  -- NULL groups, missing and null alike
  ('SELECT town, count(*), count(n), sum(n), avg(n), min(n), max(n), min(d), max(b) FROM agg_t GROUP BY town'),
  ('SELECT town, n, count(*) FROM agg_t GROUP BY town, n'),
  ('SELECT d, count(*) FROM agg_t GROUP BY d'),
  ('SELECT min(town COLLATE "C"), max(town COLLATE "C") FROM agg_t'),
  ('SELECT ''x'', count(*), 1 + sum(s) FROM agg_t'),
  ('SELECT town, sum(n) FROM agg_t GROUP BY town HAVING sum(n) > 20'),
  ('SELECT town FROM agg_t GROUP BY town HAVING count(*) > 1'),
  ('SELECT count(*) FROM agg_t HAVING count(*) > 100'),
  ('SELECT sum(f), count(f), min(f), max(f), avg(f) FROM agg_t'),
  ('SELECT min(town), max(town) FROM agg_t'),
  ('SELECT count(*), sum(n) FROM agg_t WHERE town = ''Redmond'' OR n IS NULL'),
  -- count(DISTINCT): NULLs not counted, NULL groups, no rows, text keys
  ('SELECT count(DISTINCT n), count(DISTINCT b), count(DISTINCT town), count(DISTINCT s) FROM agg_t'),
  ('SELECT count(DISTINCT n), count(*), count(DISTINCT n) FROM agg_t'),
  ('SELECT town, count(DISTINCT n), count(*) FROM agg_t GROUP BY town'),
  ('SELECT n, count(DISTINCT town) FROM agg_t GROUP BY n'),
  ('SELECT count(DISTINCT n), count(*) FROM agg_t WHERE id > 100'),
  ('SELECT town, count(DISTINCT n) FROM agg_t WHERE id > 100 GROUP BY town'),
  ('SELECT count(DISTINCT n) FROM agg_t WHERE id = 3'),
  ('SELECT town, count(DISTINCT b) FROM agg_t GROUP BY town HAVING count(DISTINCT b) > 0'),
  ('SELECT count(DISTINCT town COLLATE agg_ci) FROM agg_t'),
  ('SELECT count(DISTINCT f), count(DISTINCT d) FROM agg_t')
) v(q);
-- missing fields and nulls are one NULL group, and are no values
CREATE FOREIGN TABLE agg_people (
  id int OPTIONS (field '_id'), town text, age int, joined timestamp,
  zip text OPTIONS (field 'address.zip')
) SERVER mongo OPTIONS (collection 'people');
CREATE TABLE agg_people_local AS SELECT * FROM agg_people;
SELECT agg_same(q, 'agg_people') FROM (VALUES
  ('SELECT town, count(*), count(age), sum(age), avg(age), min(age), max(joined) FROM agg_t GROUP BY town'),
  ('SELECT zip, count(*), count(town), min(town COLLATE "C") FROM agg_t GROUP BY zip'),
  ('SELECT age, town, count(*) FROM agg_t WHERE age IS NULL OR town IS NULL GROUP BY age, town'),
  ('SELECT count(*), count(zip), sum(age) FROM agg_t WHERE town <> ''Redmond'''),
  ('SELECT town, count(DISTINCT age), count(DISTINCT joined), count(*) FROM agg_t GROUP BY town'),
  ('SELECT count(DISTINCT town), count(DISTINCT town COLLATE "C") FROM agg_t')
) v(q);
-- a value out of the column's range stops a pushed sum as it stops a scan
-- (22003), and so does a value that is no integer
CREATE FOREIGN TABLE agg_t_wide (id int OPTIONS (field '_id'), n float8)
  SERVER mongo OPTIONS (collection 'agg_t');
INSERT INTO agg_t_wide VALUES (7, 1099511627776), (8, 2.5), (9, 12.5);
SELECT show_error('SELECT sum(n) FROM agg_t');
-- 12.5 lies between the least and greatest value: still an error
EXPLAIN (COSTS OFF) SELECT sum(n) FROM agg_t WHERE id IN (1, 2, 9);
SELECT show_error('SELECT sum(n) FROM agg_t WHERE id IN (1, 2, 9)');
SELECT show_error('SELECT town, avg(n) FROM agg_t WHERE id = 8 GROUP BY town');
SET idxtable.enable_aggregate_pushdown = off;
SELECT show_error('SELECT sum(n) FROM agg_t');
SELECT show_error('SELECT town, avg(n) FROM agg_t WHERE id = 8 GROUP BY town');
RESET idxtable.enable_aggregate_pushdown;
-- count(DISTINCT) reads the values as the column does: a fraction is an
-- error, and 10 stored as a double is the int 10
SELECT show_error('SELECT count(DISTINCT n) FROM agg_t');
DELETE FROM agg_t_wide WHERE id > 6;
INSERT INTO agg_t_wide VALUES (7, 10), (8, 7);
EXPLAIN (COSTS OFF) SELECT count(DISTINCT n), count(*) FROM agg_t;
SELECT count(DISTINCT n), count(*) FROM agg_t;
SET idxtable.enable_aggregate_pushdown = off;
SELECT count(DISTINCT n), count(*) FROM agg_t;
RESET idxtable.enable_aggregate_pushdown;
DELETE FROM agg_t_wide WHERE id > 6;
-- every value a scan refuses, a pushed sum, avg, min or max refuses too
CREATE FOREIGN TABLE agg_bad (id text OPTIONS (field '_id'), v int)
  SERVER mongo OPTIONS (collection 'bad');
SELECT id, a, show_error(format('SELECT %s(v) FROM agg_bad WHERE id = %L', a, id)) AS pushed
  FROM (VALUES ('int_overflow'), ('fraction'), ('string_in_int'), ('bool_in_int')) v(id),
       (VALUES ('sum'), ('avg'), ('max'), ('count')) w(a)
  ORDER BY id, a;
SELECT id, show_error(format('SELECT count(DISTINCT v) FROM agg_bad WHERE id = %L', id)) AS pushed
  FROM (VALUES ('int_overflow'), ('fraction'), ('string_in_int'), ('bool_in_int')) v(id)
  ORDER BY id;
SET idxtable.enable_aggregate_pushdown = off;
SELECT id, show_error(format('SELECT sum(v) FROM agg_bad WHERE id = %L', id)) AS local
  FROM (VALUES ('int_overflow'), ('fraction'), ('string_in_int'), ('bool_in_int')) v(id)
  ORDER BY id;
RESET idxtable.enable_aggregate_pushdown;
DROP FOREIGN TABLE agg_bad;
SELECT sum(n) FROM agg_t;
-- a pushed aggregate in a prepared statement with a parameter
PREPARE agg_q(int) AS SELECT town, count(*), sum(n) FROM agg_t WHERE id >= $1 GROUP BY town ORDER BY town;
EXPLAIN (VERBOSE, COSTS OFF) EXECUTE agg_q(2);
EXECUTE agg_q(2);
EXECUTE agg_q(6);
DEALLOCATE agg_q;
-- ORDER BY over a pushed grouping is the pipeline's $sort, a constant
-- LIMIT/OFFSET its $skip and $limit; NULL groups and sums over no values
-- sort as PostgreSQL places NULLs (a null flag z<i> before the value)
EXPLAIN (VERBOSE, COSTS OFF)
  SELECT town, n, count(*) FROM agg_t GROUP BY town, n ORDER BY count(*) DESC, n LIMIT 2;
EXPLAIN (VERBOSE, COSTS OFF)
  SELECT n, sum(b), count(DISTINCT s) FROM agg_t GROUP BY n ORDER BY n DESC NULLS LAST;
EXPLAIN (VERBOSE, COSTS OFF)
  SELECT n, count(DISTINCT s) FROM agg_t GROUP BY n ORDER BY n LIMIT 3 OFFSET 1;
-- not pushed: text keys (ObjectIds read as text), HAVING under a LIMIT,
-- LIMIT WITH TIES, floats; a LIMIT that is not a constant stays local
EXPLAIN (COSTS OFF) SELECT town, count(*) FROM agg_t GROUP BY town ORDER BY town LIMIT 3;
EXPLAIN (COSTS OFF)
  SELECT n, count(*) FROM agg_t GROUP BY n HAVING count(*) > 1 ORDER BY n LIMIT 3;
EXPLAIN (COSTS OFF)
  SELECT n, count(*) FROM agg_t GROUP BY n ORDER BY count(*) FETCH FIRST 1 ROWS WITH TIES;
EXPLAIN (COSTS OFF) SELECT n, count(*) FROM agg_t GROUP BY n ORDER BY n LIMIT (SELECT 2);
SET idxtable.enable_order_pushdown = off;
EXPLAIN (COSTS OFF) SELECT n, count(*) FROM agg_t GROUP BY n ORDER BY n LIMIT 2;
RESET idxtable.enable_order_pushdown;
SELECT agg_same(q) FROM (VALUES
  ('SELECT n, count(*), sum(b) FROM agg_t GROUP BY n ORDER BY n'),
  ('SELECT n, count(*), sum(b) FROM agg_t GROUP BY n ORDER BY n DESC'),
  ('SELECT n, count(*), sum(b) FROM agg_t GROUP BY n ORDER BY sum(b) NULLS FIRST, n LIMIT 3 OFFSET 1'),
  ('SELECT n, count(*) FROM agg_t GROUP BY n ORDER BY count(*) DESC, n LIMIT 2'),
  ('SELECT d, s, min(n), max(b) FROM agg_t GROUP BY d, s ORDER BY max(b) DESC, s LIMIT 4'),
  ('SELECT n, count(DISTINCT s) FROM agg_t WHERE id > 100 GROUP BY n ORDER BY n LIMIT 3')
) v(q);
-- in order as well
SELECT n, count(*), sum(b) FROM agg_t GROUP BY n ORDER BY sum(b) NULLS FIRST, n LIMIT 3 OFFSET 1;
SELECT n, count(*), sum(b) FROM agg_t GROUP BY n ORDER BY n DESC;
-- a constant LIMIT/OFFSET without ORDER BY over a pushed grouping: $skip and
-- $limit without a $sort (the window still checks every group's values);
-- any groups are a right answer, but exactly as many as PostgreSQL's Limit
-- leaves, each whole (its count and sum as the local plan's)
EXPLAIN (VERBOSE, COSTS OFF) SELECT town, count(*) FROM agg_t GROUP BY town LIMIT 2 OFFSET 1;
CREATE TEMP TABLE agg_all AS
  SELECT town, n, count(*) AS c, sum(b) AS sb FROM agg_t GROUP BY town, n;
SELECT l, o, (SELECT count(*) FROM agg_lim_rows(l, o)) =
             least(l, greatest((SELECT count(*) FROM agg_all) - o, 0)) AS count_right,
       (SELECT count(*) FROM agg_lim_rows(l, o) r
         WHERE NOT EXISTS (SELECT 1 FROM agg_all a
                            WHERE a.town IS NOT DISTINCT FROM r.town AND
                                  a.n IS NOT DISTINCT FROM r.n AND a.c = r.c AND
                                  a.sb IS NOT DISTINCT FROM r.sb)) AS not_groups
  FROM (VALUES (1, 0), (3, 2), (5, 0), (100, 0), (2, 1000)) v(l, o);
EXPLAIN (COSTS OFF) SELECT town, n, count(*), sum(b) FROM agg_t GROUP BY town, n LIMIT 3 OFFSET 2;
-- not pushed: without GROUP BY (one row whatever MongoDB returns), HAVING
EXPLAIN (COSTS OFF) SELECT count(*) FROM agg_t LIMIT 1 OFFSET 1;
SELECT count(*) FROM agg_t LIMIT 1 OFFSET 1;
EXPLAIN (COSTS OFF) SELECT n, count(*) FROM agg_t GROUP BY n HAVING count(*) > 1 LIMIT 2;
DROP TABLE agg_all;
-- a value a scan refuses is an error also in a group $limit leaves out
CREATE FOREIGN TABLE agg_bad2 (id text OPTIONS (field '_id'), v int)
  SERVER mongo OPTIONS (collection 'bad');
SET enable_sort = off;
EXPLAIN (COSTS OFF) SELECT v, count(*) FROM agg_bad2 GROUP BY v ORDER BY count(*) DESC LIMIT 1;
SELECT show_error('SELECT v, count(*) FROM agg_bad2 GROUP BY v ORDER BY count(*) DESC LIMIT 1') <> 'no error' AS fails;
EXPLAIN (COSTS OFF) SELECT v, count(*) FROM agg_bad2 GROUP BY v LIMIT 1;
SELECT show_error('SELECT v, count(*) FROM agg_bad2 GROUP BY v LIMIT 1') <> 'no error' AS fails;
SET idxtable.enable_aggregate_pushdown = off;
SELECT show_error('SELECT v, count(*) FROM agg_bad2 GROUP BY v ORDER BY count(*) DESC LIMIT 1') <> 'no error' AS fails;
RESET idxtable.enable_aggregate_pushdown;
RESET enable_sort;
DROP FOREIGN TABLE agg_bad2;
-- a text group key: the first $group by the field as it is, a second over
-- its groups merging what the column reads as one value (an ObjectId and
-- its hexadecimal text; null, missing and undefined), per group rather
-- than per document; not with count(DISTINCT), whose first stage groups
-- by the keys read as text
CREATE FOREIGN TABLE agg_oid (id int OPTIONS (field '_id'), t text, g int, n int)
  SERVER mongo OPTIONS (database 'idxtable_order', collection 'aggoid');
CREATE TABLE agg_oid_local AS SELECT * FROM agg_oid;
EXPLAIN (VERBOSE, COSTS OFF) SELECT t, count(*) FROM agg_oid GROUP BY t;
EXPLAIN (VERBOSE, COSTS OFF)
  SELECT g, t, count(*), count(n), min(n) FROM agg_oid GROUP BY g, t
  ORDER BY count(*) DESC, g LIMIT 2;
SELECT t, count(*) FROM agg_oid GROUP BY t ORDER BY t COLLATE "C";
SELECT agg_same(q, 'agg_oid') FROM (VALUES
  ('SELECT t, count(*) FROM agg_t GROUP BY t'),
  ('SELECT t, g, count(*), count(n), sum(n), avg(n), min(n), max(t COLLATE "C"), count(t) FROM agg_t GROUP BY t, g'),
  ('SELECT g, t, count(*) FROM agg_t GROUP BY g, t ORDER BY count(*) DESC, g, t LIMIT 3'),
  ('SELECT t, count(*) FROM agg_t WHERE id > 2 GROUP BY t HAVING count(*) > 1'),
  ('SELECT t, count(*) FROM agg_t WHERE id > 100 GROUP BY t'),
  ('SELECT t, count(DISTINCT n), count(*) FROM agg_t GROUP BY t'),
  ('SELECT n, count(DISTINCT t) FROM agg_t GROUP BY n'),
  ('SELECT count(DISTINCT t), count(*) FROM agg_t')
) v(q);
-- a LIMIT without ORDER BY over the merged groups: as many groups as
-- PostgreSQL's Limit leaves, each whole
SELECT count(*) AS groups, bool_and(o.count = l.count) AS whole
  FROM (SELECT t, count(*) FROM agg_oid GROUP BY t LIMIT 3 OFFSET 1) o
  JOIN (SELECT t, count(*) FROM agg_oid_local GROUP BY t) l
    ON o.t IS NOT DISTINCT FROM l.t;
DROP TABLE agg_oid_local;
DROP FOREIGN TABLE agg_oid;
-- EXPLAIN ANALYZE counts the groups returned
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT town, count(*) FROM agg_t GROUP BY town;
DROP FOREIGN TABLE agg_t_wide;
DROP TABLE agg_people_local;
DROP FOREIGN TABLE agg_people;
DROP FUNCTION agg_same(text);
DROP FUNCTION agg_same(text, text);
DROP FUNCTION agg_lim_rows(int, int);
DROP TABLE agg_local;
DROP COLLATION agg_ci;
DELETE FROM agg_t;
DROP FOREIGN TABLE agg_t;
