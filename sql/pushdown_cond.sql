--
-- pushdown_cond: float ranges with NaN (PostgreSQL sorts it above every
-- number, MongoDB below), bounds on one field merged into one range, and
-- comparisons of two columns as $expr; every result equals a local copy's
--
CREATE FOREIGN TABLE cond (
  id int OPTIONS (field '_id'), f float8, g float8, r real, a int, b bigint,
  ts timestamptz, ts2 timestamptz, w float8 OPTIONS (field 'sub.w')
) SERVER mongo_nostream OPTIONS (database 'idxtable_writes', collection 'cond');
DELETE FROM cond;
INSERT INTO cond VALUES
  (1, 'NaN', 1, 'NaN', 1, 2, '2020-01-01', '2020-01-02', 'NaN'),
  (2, 1.5, 'NaN', 1.5, 3, 2, '2020-01-03', '2020-01-02', 1.5),
  (3, '-Infinity', 'Infinity', '-Infinity', 2, 2, '2020-01-02', '2020-01-02', 2.5),
  (4, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
  (5, 0, '-0', 0, 5, 5000000000, '2020-01-01', NULL, 0),
  (6, 'Infinity', 'NaN', 'Infinity', -1, -1, NULL, '2020-01-01', '-Infinity'),
  (7, 2.5, 2.5, 2.5, 7, 7, '2021-06-01', '2021-06-01', 3),
  (8, -1e300, 3, -3, 0, 1, '2019-01-01', '2020-01-01', NULL),
  (9, 'NaN', 'NaN', 'NaN', 4, 4, '2020-01-01', '2020-01-01', 'NaN');
-- a document without the fields, one with f undefined (both read as NULL)
\! /usr/bin/python3 test/fixtures/documents.py insert cond '{"_id": 10}'
\! /usr/bin/python3 test/fixtures/documents.py undefined cond '{"_id": 11, "g": 1.0, "a": 1, "b": 1}' f
CREATE TABLE cond_local AS SELECT * FROM cond;
SELECT count(*) FROM cond_local;

-- float ranges: a lower bound adds the NaNs, an upper bound leaves them out
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM cond WHERE f > 1;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM cond WHERE f < 2;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM cond WHERE NOT f < 2;
-- bounds at NaN: > NaN is nothing, >= NaN is = NaN, < NaN every number
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM cond WHERE f > 'NaN' OR f >= 'NaN';
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM cond WHERE f < 'NaN' OR f <= 'NaN';
-- a lower and an upper bound on one field: one range, NaN excluded
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM cond WHERE f > 0 AND f <= 2.5;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM cond WHERE f BETWEEN 0 AND 'NaN';
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM cond WHERE NOT (f < 0 OR a > 5 OR f > 2);
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM cond WHERE a >= 1 AND b < 5 AND a < 5 AND b > 1 AND a < 3;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM cond WHERE w > 0 AND w < 3;
-- two columns: an $expr next to both fields required to be non-null
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM cond WHERE a < b AND a > 0;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM cond WHERE NOT a <> b;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM cond WHERE f < g;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM cond WHERE NOT f < g;
-- integer sums and differences: a superset, rechecked locally; fields that
-- are no number within +-2^48 and int4 steps out of range come back, so
-- that PostgreSQL's overflow error is raised here too
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM cond WHERE a + 1 < b;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM cond WHERE NOT (b - a - 1 <> 0);
SELECT id FROM cond WHERE a + 2147483647 > b;
SELECT id FROM cond_local WHERE a + 2147483647 > b;
-- not pushed: larger constants, mixed families, dotted paths
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM cond WHERE b + 1000000000000000 > a OR f < a OR w < f;

CREATE FUNCTION cond_same(clause text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  remote text;
  local text;
BEGIN
  EXECUTE format('SELECT string_agg(id::text, '','' ORDER BY id) FROM cond WHERE %s', clause) INTO remote;
  EXECUTE format('SELECT string_agg(id::text, '','' ORDER BY id) FROM cond_local WHERE %s', clause) INTO local;
  IF remote IS DISTINCT FROM local THEN
    RETURN format('MISMATCH %s: remote %s local %s', clause, remote, local);
  END IF;
  RETURN format('%s: %s', clause, coalesce(remote, '(none)'));
END $$;
SELECT cond_same(c) FROM (VALUES
  ('f > 1'), ('f >= 1.5'), ('f < 2'), ('f <= 2.5'), ('f > ''-Infinity'''), ('f < ''Infinity'''),
  ('f >= ''-Infinity'''), ('f <= ''Infinity'''), ('f > ''NaN'''), ('f >= ''NaN'''), ('f < ''NaN'''),
  ('f <= ''NaN'''), ('f = ''NaN'''), ('f <> ''NaN'''), ('NOT f > 1'), ('NOT f <= 2.5'),
  ('NOT f < ''NaN'''), ('NOT f >= ''NaN'''), ('f IN (1.5, ''NaN'')'), ('f NOT IN (1.5, ''NaN'')'),
  ('f = -0.0'), ('r > 1'), ('r <= ''NaN'''), ('r > 1::float8'), ('r < 2.5::float8'), ('NOT r > 0'),
  ('f > 0 AND f <= 2.5'), ('f > ''-Infinity'' AND f < ''Infinity'''), ('f BETWEEN 0 AND ''NaN'''),
  ('f NOT BETWEEN 0 AND 2'), ('NOT (f < 0 OR f > 2)'), ('f > 1 AND f > 2 AND f < ''NaN'''),
  ('a >= 1 AND b < 5 AND a < 5 AND b > 1 AND a < 3'), ('w > 0 AND w < 3'), ('NOT (w <= 0 OR w >= 3)'),
  ('a < b'), ('a <= b'), ('a = b'), ('a <> b'), ('a > b'), ('a >= b'), ('NOT a < b'), ('NOT a = b'),
  ('id > a'), ('id = b'), ('f < g'), ('f <= g'), ('f = g'), ('f <> g'), ('f > g'), ('f >= g'),
  ('NOT f < g'), ('NOT f <= g'), ('NOT f = g'), ('f < r'), ('r >= f'), ('f = f'), ('f < f'),
  ('ts < ts2'), ('ts >= ts2'), ('NOT ts = ts2'), ('a < b OR f > g'), ('NOT (a < b AND f <= g)'),
  ('a + 1 < b'), ('NOT a + 1 < b'), ('a - b >= -1'), ('b - a - 1 = 0'), ('a + b + 1 = 5'),
  ('NOT (a + b <> 5 OR a - 1 > 0)'), ('a + 1 > 2'), ('b + 1000000000000000 > a'), ('f < a')
) AS v(c);

-- a parameter's NaN is handled at execution
PREPARE cond_p(float8) AS SELECT string_agg(id::text, ',' ORDER BY id) FROM cond WHERE f > $1;
PREPARE cond_l(float8) AS SELECT string_agg(id::text, ',' ORDER BY id) FROM cond_local WHERE f > $1;
EXECUTE cond_p(1); EXECUTE cond_l(1);
EXECUTE cond_p('NaN'); EXECUTE cond_l('NaN');
EXECUTE cond_p('-Infinity'); EXECUTE cond_l('-Infinity');
DEALLOCATE cond_p;
DEALLOCATE cond_l;
DROP FUNCTION cond_same(text);
DROP TABLE cond_local;
DROP FOREIGN TABLE cond;
