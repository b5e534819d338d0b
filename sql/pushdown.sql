--
-- pushdown: which WHERE clauses become MongoDB filters, and that the
-- results equal PostgreSQL's three-valued logic on NULL and missing fields
--
CREATE FOREIGN TABLE people (
  id int OPTIONS (field '_id'), name text, town text, age int,
  active boolean, score float8, joined timestamp, uid uuid,
  zip text OPTIONS (field 'address.zip')
) SERVER mongo OPTIONS (collection 'people');
CREATE TABLE people_local AS SELECT * FROM people;
-- basic comparisons
EXPLAIN (VERBOSE, COSTS OFF) SELECT id, name FROM people WHERE age > 30;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM people WHERE age <> 25 AND town = 'Redmond';
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM people WHERE town IN ('Redmond', 'Seattle');
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM people WHERE town NOT IN ('Redmond', 'Seattle');
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM people WHERE age IS NULL OR NOT active;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM people WHERE NOT (age > 30 AND town = 'Seattle');
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM people WHERE active;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM people WHERE zip = '98001';
-- text ranges: only under a collation that orders as bytes (C, or the
-- database's C.UTF-8), as a range of the strings or one of the ObjectIds
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM people WHERE town < 'S';
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM people WHERE town COLLATE "C" < 'S';
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM people WHERE town COLLATE "en-x-icu" = 'Redmond';
-- not pushed: functions, LIKE (float ranges are, with NaN named: PostgreSQL sorts it last)
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM people WHERE lower(town) = 'redmond' AND name LIKE 'p%' AND score > 3;
-- the projection follows the columns the query needs
SET idxtable.enable_aggregate_pushdown = off;
EXPLAIN (VERBOSE, COSTS OFF) SELECT count(*) FROM people;
RESET idxtable.enable_aggregate_pushdown;
EXPLAIN (VERBOSE, COSTS OFF) SELECT name, zip FROM people;
-- every one of these must return what the local copy returns
CREATE FUNCTION check_same(clause text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  remote text;
  local text;
BEGIN
  EXECUTE format('SELECT string_agg(id::text, '','' ORDER BY id) FROM people WHERE %s', clause) INTO remote;
  EXECUTE format('SELECT string_agg(id::text, '','' ORDER BY id) FROM people_local WHERE %s', clause) INTO local;
  IF remote IS DISTINCT FROM local THEN
    RETURN format('MISMATCH %s: remote %s local %s', clause, remote, local);
  END IF;
  RETURN format('%s: %s', clause, coalesce(remote, '(none)'));
END $$;
SELECT check_same(c) FROM (VALUES
  ('age > 30'), ('age >= 30'), ('age < 30'), ('age <= 30'), ('age = 24'), ('age <> 24'),
  ('NOT age = 24'), ('NOT (age > 30)'), ('age IS NULL'), ('age IS NOT NULL'),
  ('town = ''Redmond'''), ('town <> ''Redmond'''), ('NOT town = ''Redmond'''),
  ('town IS NULL'), ('town IN (''Redmond'', ''Seattle'')'),
  ('town NOT IN (''Redmond'', ''Seattle'')'), ('town IN (''Redmond'', NULL)'),
  ('town NOT IN (''Redmond'', NULL)'), ('town = ANY (ARRAY[''Bellevue''])'),
  ('town <> ALL (ARRAY[''Bellevue'', ''redmond''])'),
  ('active'), ('NOT active'), ('active IS NULL'), ('active = false'), ('active <> true'),
  ('active OR age > 35'), ('NOT (active OR age > 35)'), ('NOT (active AND age > 35)'),
  ('town COLLATE "C" < ''S'''), ('town COLLATE "C" >= ''S'''), ('NOT town COLLATE "C" > ''R'''),
  ('joined > ''2020-05-01'''), ('joined <= ''2020-05-01'''), ('uid = ''00000000-0000-0000-0000-000000000003'''),
  ('uid > ''00000000-0000-0000-0000-000000000010'''), ('score = 3'), ('score <> 3'),
  ('zip = ''98001'''), ('zip IS NULL'), ('age = NULL'), ('age IN (21, 24, NULL)'),
  ('age > 2147483647::bigint'), ('age < 30::int2'), ('age = 24.0::float8'),
  ('town = ANY (''{}''::text[])'), ('town <> ALL (''{}''::text[])'),
  ('NOT (town = ANY (''{}''::text[]))'), ('town = ANY (''{NULL}''::text[])'),
  ('NOT (town <> ALL (''{NULL}''::text[]))')
) AS v(c);
