--
-- undefined: the deprecated BSON undefined reads as SQL NULL, and the
-- pushed-down forms of IS NULL, IS NOT NULL, <> and NOT IN select the same
-- documents on MongoDB 6.0/7.0 (where {f: null} matches undefined) and 8.0
-- (where it does not; the test server matches as 8.0 does).
--
\! /usr/bin/python3 test/fixtures/documents.py delete undef '{}' > /dev/null
\! /usr/bin/python3 test/fixtures/documents.py undefined undef '{"_id": 1, "n": 1}' f
\! /usr/bin/python3 test/fixtures/documents.py insert undef '{"_id": 2, "f": null, "n": 2}'
\! /usr/bin/python3 test/fixtures/documents.py insert undef '{"_id": 3, "n": 3}'
\! /usr/bin/python3 test/fixtures/documents.py insert undef '{"_id": 4, "f": "x", "n": 4}'
\! /usr/bin/python3 test/fixtures/documents.py insert undef '{"_id": 5, "f": "y", "n": 5}'
\! /usr/bin/python3 test/fixtures/documents.py count undef '{"f": {"$type": "undefined"}}'
CREATE FOREIGN TABLE undef (id int OPTIONS (field '_id'), f text, n int)
  SERVER mongo OPTIONS (database 'idxtable_writes', collection 'undef');
SELECT * FROM undef ORDER BY id;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM undef WHERE f IS NULL;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM undef WHERE f IS NOT NULL;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM undef WHERE f <> 'x';
-- each pushed-down clause selects the rows PostgreSQL selects from what it
-- reads (the whole table, compared locally)
CREATE TEMP TABLE undef_local AS SELECT * FROM undef;
CREATE FUNCTION undef_check(cond text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  remote text;
  local text;
BEGIN
  EXECUTE format('SELECT string_agg(id::text, '','' ORDER BY id) FROM undef WHERE %s', cond)
    INTO remote;
  EXECUTE format('SELECT string_agg(id::text, '','' ORDER BY id) FROM undef_local WHERE %s', cond)
    INTO local;
  RETURN cond || ': ' || coalesce(remote, '(none)') ||
         CASE WHEN remote IS DISTINCT FROM local THEN ' DIFFERS from ' || coalesce(local, '(none)') ELSE '' END;
END $$;
SELECT undef_check(c) FROM (VALUES ('f IS NULL'), ('f IS NOT NULL'), ('f = ''x'''),
  ('f <> ''x'''), ('NOT (f = ''y'')'), ('f NOT IN (''x'', ''z'')'), ('f IN (''x'', NULL)'),
  ('f <> ALL (ARRAY[''y''])'), ('f IS NULL OR n > 4'), ('NOT (f IS NULL)')) v(c);
-- an index table keys undefined as NULL, as it reads
SELECT idxtable.create_index('undef', '{f}', name => 'undef_f');
SET idxtable.enable_plain_scan = off;
EXPLAIN (COSTS OFF) SELECT id FROM undef WHERE f IS NULL;
SELECT id FROM undef WHERE f IS NULL ORDER BY id;
RESET idxtable.enable_plain_scan;
UPDATE undef SET n = n + 10 WHERE f IS NULL;
-- (undefined stays undefined: an UPDATE sets only the columns assigned)
\! /usr/bin/python3 test/fixtures/documents.py count undef '{"f": {"$type": "undefined"}}'
SELECT * FROM undef ORDER BY id;
SELECT (idxtable.verify_index('undef_f')).*;
SELECT idxtable.drop_index('undef_f');
DROP FUNCTION undef_check(text);
DROP FOREIGN TABLE undef;
