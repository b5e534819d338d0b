--
-- arrpath: a dotted field path that crosses an array.  MongoDB's matcher
-- looks into every element ({"meta.vc": "x"} matches meta: [{vc: "x"}]), so
-- such a path has several values or none: a scalar column refuses to read
-- it (2202E, naming column, collection and _id), an array column reads
-- them all; a pushed-down condition on a dotted path lets those documents
-- through, so that it fails exactly where evaluating it locally would.
--
\! /usr/bin/python3 test/fixtures/documents.py delete arrpath_s '{}' > /dev/null
\! /usr/bin/python3 test/fixtures/documents.py delete arrpath_a '{}' > /dev/null
\! /usr/bin/python3 test/fixtures/documents.py insert arrpath_s '{"_id": 1, "meta": [{"vc": "x"}]}'
\! /usr/bin/python3 test/fixtures/documents.py insert arrpath_s '{"_id": 2, "meta": {"vc": "y"}}'
\! /usr/bin/python3 test/fixtures/documents.py insert arrpath_s '{"_id": 3, "meta": {"vc": null}}'
\! /usr/bin/python3 test/fixtures/documents.py insert arrpath_s '{"_id": 4}'
\! /usr/bin/python3 test/fixtures/documents.py insert arrpath_a '{"_id": 1, "meta": [{"vc": "x"}]}'
\! /usr/bin/python3 test/fixtures/documents.py insert arrpath_a '{"_id": 2, "meta": [{"vc": "a"}, {"vc": ["b", "c"]}, 5, {"other": 1}, [{"vc": "nested"}], {"vc": null}]}'
\! /usr/bin/python3 test/fixtures/documents.py insert arrpath_a '{"_id": 3, "meta": []}'
\! /usr/bin/python3 test/fixtures/documents.py insert arrpath_a '{"_id": 4}'
\! /usr/bin/python3 test/fixtures/documents.py insert arrpath_a '{"_id": 5, "meta": {"vc": ["p", "q"]}}'
\! /usr/bin/python3 test/fixtures/documents.py insert arrpath_a '{"_id": 6, "deep": {"a": [{"b": {"c": [{"d": 1}, {"d": 2}]}}, {"b": {"c": {"d": 3}}}]}}'
CREATE FOREIGN TABLE arrpath_s (id int OPTIONS (field '_id'),
                                vc text OPTIONS (field 'meta.vc'))
  SERVER mongo OPTIONS (database 'idxtable_writes', collection 'arrpath_s');
CREATE FOREIGN TABLE arrpath_a (id int OPTIONS (field '_id'),
                                vcs text[] OPTIONS (field 'meta.vc'),
                                ds int[] OPTIONS (field 'deep.a.b.c.d'))
  SERVER mongo OPTIONS (database 'idxtable_writes', collection 'arrpath_a');

-- a scalar column: documents where the path crosses no array read as ever
SELECT * FROM arrpath_s WHERE id IN (2, 3, 4) ORDER BY id;
-- ... and one where it does is an error, not NULL
SELECT show_error('SELECT * FROM arrpath_s ORDER BY id');
-- a condition on the path lets through the documents where a prefix of the
-- path is an array: the row is never returned with a value that
-- contradicts the condition, and never silently left out
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM arrpath_s WHERE vc = 'x';
SELECT show_error('SELECT id, vc FROM arrpath_s WHERE vc = ''x''');
SELECT show_error('SELECT id, vc FROM arrpath_s WHERE vc IS NULL');
SELECT show_error('SELECT id, vc FROM arrpath_s WHERE vc <> ''y''');
-- where MongoDB selects by _id first, the condition applies to that fact
SELECT id, vc FROM arrpath_s WHERE id = 2 AND vc = 'y';
SELECT id, vc FROM arrpath_s WHERE id = 3 AND vc IS NULL;
-- the name of the column and field in the message, without _id for a role
-- that may not read it
CREATE ROLE regress_arrpath;
GRANT USAGE ON FOREIGN SERVER mongo TO regress_arrpath;
GRANT SELECT (vc) ON arrpath_s TO regress_arrpath;
\set server mongo
\set mapping_role regress_arrpath
\i test/fixtures/user_mapping.sql
SET ROLE regress_arrpath;
SELECT show_error('SELECT vc FROM arrpath_s');
RESET ROLE;
DROP USER MAPPING FOR regress_arrpath SERVER mongo;
REVOKE ALL ON arrpath_s FROM regress_arrpath;
REVOKE USAGE ON FOREIGN SERVER mongo FROM regress_arrpath;
DROP ROLE regress_arrpath;
-- an index on such a column cannot be built (the fact's key is unknown)
SELECT show_error($$SELECT idxtable.create_index('arrpath_s', '{vc}', name => 'arrpath_s_vc')$$);
SELECT count(*) FROM idxtable.indexes WHERE name = 'arrpath_s_vc';

-- an array column reads the values of all elements that are documents,
-- an array at the end of the path spliced in (as the matcher sees them)
SELECT * FROM arrpath_a ORDER BY id;
-- a multi-valued index has an entry per value read
SELECT idxtable.create_index('arrpath_a', '{vcs}', name => 'arrpath_a_vcs');
SET idxtable.enable_plain_scan = off;
EXPLAIN (COSTS OFF) SELECT id FROM arrpath_a WHERE 'b' = ANY (vcs);
SELECT id FROM arrpath_a WHERE 'b' = ANY (vcs);
SELECT id FROM arrpath_a WHERE 'x' = ANY (vcs);
RESET idxtable.enable_plain_scan;
SELECT (idxtable.verify_index('arrpath_a_vcs')).*;
SELECT idxtable.drop_index('arrpath_a_vcs');
DROP FOREIGN TABLE arrpath_s, arrpath_a;
