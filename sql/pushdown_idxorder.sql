--
-- pushdown_idxorder: ORDER BY a text key of an index table, and ORDER BY
-- key, _id, under C-like collations (C, POSIX, C.<encoding>).  Entries
-- hold text keys as strings, which MongoDB compares as bytes: the lookup
-- reads them in the column's order, NULL keys last.  ORDER BY key, _id
-- reads each group of equal keys whole and sorts it by the facts' _ids as
-- the _id column compares them (string, ObjectId and other _ids mixed,
-- as text in byte order), so a LIMIT reads about as many entries as rows.
-- Every result is a heap table's with the same rows.
--
SET idxtable.index_consistency = 'any';
\! /usr/bin/python3 test/fixtures/documents.py delete idxorder_facts '{}' > /dev/null
-- string and ObjectId _ids; towns with ties, null and missing
\! /usr/bin/python3 test/fixtures/documents.py insert idxorder_facts '[{"_id":"été","n":22,"town":null},{"_id":{"$oid":"a0000000000000000000001d"},"n":8,"town":"seattle"},{"_id":"","n":23},{"_id":"b","n":20,"town":"seattle"},{"_id":{"$oid":"900000000000000000000016"},"n":6,"town":"Seattle"},{"_id":{"$oid":"50000000000000000000000f"},"n":4,"town":null},{"_id":"f","n":24,"town":"Seattle"},{"_id":"0","n":14,"town":"seattle"},{"_id":"Z","n":21,"town":"Ärhus"},{"_id":{"$oid":"500000000000000000000012"},"n":5},{"_id":"00","n":15,"town":"Ärhus"},{"_id":{"$oid":"c00000000000000000000024"},"n":10,"town":null},{"_id":{"$oid":"900000000000000000000019"},"n":7,"town":"Redmond"},{"_id":"9zz","n":18,"town":"Seattle"},{"_id":{"$oid":"10000000000000000000000b"},"n":3,"town":"Ärhus"},{"_id":{"$oid":"000000000000000000000004"},"n":1,"town":"Redmond"},{"_id":{"$oid":"000000000000000000000001"},"n":0,"town":"Seattle"},{"_id":{"$oid":"f0000000000000000000002e"},"n":13,"town":"Redmond"},{"_id":{"$oid":"f0000000000000000000002b"},"n":12,"town":"Seattle"},{"_id":"g","n":26,"town":"seattle"},{"_id":"5","n":16,"town":null},{"_id":{"$oid":"a00000000000000000000020"},"n":9,"town":"Ärhus"},{"_id":"ffffffffffffffffffffffff0","n":25,"town":"Redmond"},{"_id":"a","n":19,"town":"Redmond"},{"_id":{"$oid":"c00000000000000000000027"},"n":11},{"_id":{"$oid":"100000000000000000000008"},"n":2,"town":"seattle"},{"_id":"5f","n":17}]'
CREATE FOREIGN TABLE idxorder (_id text COLLATE "C", town text COLLATE "C",
  n int) SERVER mongo OPTIONS (database 'idxtable_writes',
  collection 'idxorder_facts');
CREATE TEMP TABLE idxorder_local AS SELECT * FROM idxorder;
SELECT idxtable.create_index('idxorder', '{town}', name => 'idxorder_town');
ANALYZE idxorder;
SET idxtable.enable_plain_scan = off;
-- the key's order, then the _id's: one lookup in key order, facts by $in
EXPLAIN (VERBOSE, COSTS OFF)
  SELECT * FROM idxorder ORDER BY town, _id LIMIT 5;
SELECT * FROM idxorder ORDER BY town, _id LIMIT 5;
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT * FROM idxorder ORDER BY town, _id LIMIT 5;
-- a range on the key, with OFFSET
EXPLAIN (VERBOSE, COSTS OFF)
  SELECT _id, town FROM idxorder WHERE town >= 'Seattle' AND town < 'seattle'
  ORDER BY town, _id LIMIT 3 OFFSET 2;
SELECT _id, town FROM idxorder WHERE town >= 'Seattle' AND town < 'seattle'
  ORDER BY town, _id LIMIT 3 OFFSET 2;
-- the key alone: its order, no sort of ties
EXPLAIN (VERBOSE, COSTS OFF)
  SELECT town FROM idxorder WHERE town > 'Redmond' ORDER BY town LIMIT 4;
-- every result is the heap table's, in the same order
CREATE FUNCTION idxorder_same(query text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  routed text;
  heap text;
BEGIN
  EXECUTE format('SELECT string_agg(t::text, '' '') FROM (%s) t', query) INTO routed;
  EXECUTE format('SELECT string_agg(t::text, '' '') FROM (%s) t',
                 replace(query, 'FROM idxorder ', 'FROM idxorder_local ')) INTO heap;
  RETURN CASE WHEN routed IS NOT DISTINCT FROM heap THEN 'same: ' ELSE 'DIFFERENT: ' END || query;
END $$;
SELECT idxorder_same(q) FROM (VALUES
  ('SELECT _id, town FROM idxorder ORDER BY town, _id'),
  ('SELECT _id, town FROM idxorder ORDER BY town, _id LIMIT 7'),
  ('SELECT _id, town FROM idxorder ORDER BY town, _id LIMIT 4 OFFSET 9'),
  ('SELECT _id, town FROM idxorder ORDER BY town, _id LIMIT 5 OFFSET 20'),
  ('SELECT _id, town FROM idxorder WHERE town >= ''Seattle'' ORDER BY town, _id LIMIT 6'),
  ('SELECT _id, town FROM idxorder WHERE town > ''Redmond'' AND town <= ''seattle'' ORDER BY town, _id'),
  ('SELECT town FROM idxorder WHERE town < ''Seattle'' ORDER BY town LIMIT 3'),
  ('SELECT _id, town FROM idxorder WHERE town = ''Seattle'' ORDER BY town, _id LIMIT 3'),
  ('SELECT _id, n FROM idxorder WHERE town = ''seattle'' ORDER BY _id LIMIT 2 OFFSET 1'),
  ('SELECT _id, n FROM idxorder WHERE town IS NULL ORDER BY _id'),
  ('SELECT _id, n FROM idxorder WHERE town IS NULL ORDER BY _id LIMIT 4')
) AS v(q);
-- an equality fixes the key: its entries are one group, sorted by _id,
-- and only the facts of the rows are fetched
EXPLAIN (COSTS OFF)
  SELECT _id, town FROM idxorder WHERE town = 'Seattle' ORDER BY town, _id LIMIT 3;
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT _id, n FROM idxorder WHERE town IS NULL ORDER BY _id LIMIT 2;
SELECT _id, n FROM idxorder WHERE town IS NULL ORDER BY _id LIMIT 2;
-- the key in every direction and NULL order, then the _id (ASC NULLS
-- LAST): the NULL entries are one group, read by a find of their own
-- where MongoDB places them otherwise; another order of the _id stays a
-- local sort
EXPLAIN (VERBOSE, COSTS OFF)
  SELECT _id, town FROM idxorder ORDER BY town DESC NULLS FIRST, _id LIMIT 5;
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT _id, town FROM idxorder ORDER BY town DESC NULLS FIRST, _id LIMIT 5;
SELECT _id, town FROM idxorder ORDER BY town DESC NULLS FIRST, _id LIMIT 5;
EXPLAIN (COSTS OFF)
  SELECT _id, town FROM idxorder WHERE town IS NULL OR town > 'S'
  ORDER BY town NULLS FIRST, _id LIMIT 4;
EXPLAIN (COSTS OFF)
  SELECT _id, town FROM idxorder ORDER BY town DESC, _id DESC LIMIT 4;
SELECT idxorder_same(q) FROM (VALUES
  ('SELECT _id, town FROM idxorder ORDER BY town NULLS FIRST, _id'),
  ('SELECT _id, town FROM idxorder ORDER BY town NULLS FIRST, _id LIMIT 6'),
  ('SELECT _id, town FROM idxorder ORDER BY town DESC, _id'),
  ('SELECT _id, town FROM idxorder ORDER BY town DESC, _id LIMIT 6 OFFSET 2'),
  ('SELECT _id, town FROM idxorder ORDER BY town DESC NULLS LAST, _id'),
  ('SELECT _id, town FROM idxorder ORDER BY town DESC NULLS LAST, _id LIMIT 3 OFFSET 21'),
  ('SELECT _id, town FROM idxorder ORDER BY town, _id LIMIT 4 OFFSET 20'),
  ('SELECT _id, town FROM idxorder ORDER BY town DESC, _id DESC LIMIT 5'),
  ('SELECT _id, town FROM idxorder WHERE town IS NULL OR town > ''S'' ORDER BY town NULLS FIRST, _id LIMIT 4'),
  ('SELECT _id, town FROM idxorder WHERE town IS NULL OR town > ''S'' ORDER BY town DESC, _id'),
  ('SELECT _id, town FROM idxorder WHERE town IS NULL OR town < ''S'' ORDER BY town, _id LIMIT 8'),
  ('SELECT _id, town FROM idxorder WHERE town > ''Redmond'' ORDER BY town DESC, _id LIMIT 4')
) AS v(q);
-- a rescan for each outer row: the groups start over
EXPLAIN (COSTS OFF)
  SELECT v.t, s._id FROM (VALUES ('seattle'), ('Redmond'), (NULL)) v(t),
  LATERAL (SELECT _id FROM idxorder WHERE town = v.t ORDER BY _id LIMIT 2) s;
SELECT v.t, s._id FROM (VALUES ('seattle'), ('Redmond'), (NULL)) v(t),
  LATERAL (SELECT _id FROM idxorder WHERE town = v.t ORDER BY _id LIMIT 2) s;
SELECT v.t, s._id FROM (VALUES ('seattle'), ('Redmond'), (NULL)) v(t),
  LATERAL (SELECT _id FROM idxorder_local WHERE town = v.t ORDER BY _id LIMIT 2) s;
-- groups of equal keys larger than a batch of facts: every row comes
ALTER FOREIGN TABLE idxorder OPTIONS (ADD fetch_size '3', ADD fetch_batch_size '2');
SELECT idxorder_same(q) FROM (VALUES
  ('SELECT _id, town FROM idxorder ORDER BY town, _id'),
  ('SELECT _id, n FROM idxorder WHERE town = ''Seattle'' ORDER BY _id'),
  ('SELECT _id, n FROM idxorder WHERE town IS NULL ORDER BY _id'),
  ('SELECT _id, town FROM idxorder ORDER BY town DESC, _id'),
  ('SELECT _id, town FROM idxorder ORDER BY town NULLS FIRST, _id LIMIT 9'),
  ('SELECT _id, town FROM idxorder WHERE town IS NULL OR town > ''S'' ORDER BY town DESC, _id')
) AS v(q);
ALTER FOREIGN TABLE idxorder OPTIONS (DROP fetch_size, DROP fetch_batch_size);
-- the _id under another collation: ties sorted in its order all the same
ALTER FOREIGN TABLE idxorder ALTER COLUMN _id TYPE text COLLATE "en-x-icu";
EXPLAIN (COSTS OFF)
  SELECT _id, town FROM idxorder ORDER BY town, _id LIMIT 4;
SELECT _id, town FROM idxorder ORDER BY town, _id LIMIT 4;
SELECT _id, town FROM idxorder_local ORDER BY town, _id COLLATE "en-x-icu" LIMIT 4;
ALTER FOREIGN TABLE idxorder ALTER COLUMN _id TYPE text COLLATE "C";
-- a key under a collation that is not byte order: not in the index's order
ALTER FOREIGN TABLE idxorder ALTER COLUMN town TYPE text COLLATE "en-x-icu";
EXPLAIN (COSTS OFF)
  SELECT _id, town FROM idxorder ORDER BY town, _id LIMIT 4;
ALTER FOREIGN TABLE idxorder ALTER COLUMN town TYPE text COLLATE "C";
SELECT idxtable.drop_index('idxorder_town');
-- two keys in one direction, the second placing NULLs as MongoDB does,
-- then the _id: a group is the entries whose keys are both equal
RESET idxtable.enable_plain_scan;
UPDATE idxorder SET n = n % 3 WHERE n IS NOT NULL;
UPDATE idxorder_local SET n = n % 3 WHERE n IS NOT NULL;
SELECT idxtable.create_index('idxorder', '{town,n}', name => 'idxorder_town_n');
SET idxtable.enable_plain_scan = off;
EXPLAIN (COSTS OFF)
  SELECT _id, town, n FROM idxorder ORDER BY town DESC NULLS FIRST, n DESC NULLS LAST, _id LIMIT 5;
SELECT idxorder_same(q) FROM (VALUES
  ('SELECT _id, town, n FROM idxorder ORDER BY town DESC NULLS FIRST, n DESC NULLS LAST, _id'),
  ('SELECT _id, town, n FROM idxorder ORDER BY town DESC NULLS FIRST, n DESC NULLS LAST, _id LIMIT 5'),
  ('SELECT _id, town, n FROM idxorder ORDER BY town, n NULLS FIRST, _id LIMIT 9'),
  ('SELECT _id, town, n FROM idxorder ORDER BY town NULLS FIRST, n NULLS FIRST, _id LIMIT 7 OFFSET 3'),
  ('SELECT _id, town, n FROM idxorder WHERE town = ''seattle'' ORDER BY n DESC, _id LIMIT 3'),
  ('SELECT _id, town, n FROM idxorder WHERE town = ''Seattle'' AND n = 0 ORDER BY _id')
) AS v(q);
RESET idxtable.enable_plain_scan;
DROP FUNCTION idxorder_same(text);
SELECT idxtable.drop_index('idxorder_town_n');
DROP FOREIGN TABLE idxorder;
DROP TABLE idxorder_local;
-- a group of equal keys larger than a batch of the lookup is read in _id
-- order by MongoDB (entries sorted on their _id, whose last field is the
-- fact's _id): text _ids as one find of strings and one of ObjectIds,
-- merged as bytes, after a limit-1 find has shown the group has no _id of
-- another type; the lookup goes on after the group, in every direction
-- and NULL order
\! /usr/bin/python3 test/fixtures/documents.py delete idxorder_groups '{}' > /dev/null
\! /usr/bin/python3 test/fixtures/documents.py insert idxorder_groups '[{"_id":"b30","n":8,"town":"Redmond"},{"_id":"A18","n":17,"town":null},{"_id":{"$oid":"cb5c74273f98e2774cbd87ad"},"n":30,"town":"Tacoma"},{"_id":"b70","n":23,"town":"Seattle"},{"_id":"z74","n":4,"town":"Redmond"},{"_id":"c13","n":20},{"_id":"A83","n":1,"town":"Redmond"},{"_id":{"$oid":"269e0d37f2a74de452e6b438"},"n":0,"town":"Redmond"},{"_id":{"$oid":"1600a35a099950d836f675cc"},"n":6,"town":"Redmond"},{"_id":{"$oid":"7731af10506bf2efc6f87718"},"n":28,"town":"Bellevue"},{"_id":{"$oid":"a38fd547923a736994e3bf91"},"n":21,"town":"Seattle"},{"_id":"a64","n":5,"town":"Redmond"},{"_id":{"$oid":"953f48f1a09f76b5a170b338"},"n":12},{"_id":"f63","n":26,"town":"Seattle"},{"_id":"a73","n":13,"town":null},{"_id":"046","n":29,"town":"Bellevue"},{"_id":{"$oid":"1818e811892f902bd23f0824"},"n":3,"town":"Redmond"},{"_id":{"$oid":"6d76b07e881ed162ae2eb154"},"n":27,"town":"Seattle"},{"_id":"g71","n":19,"town":null},{"_id":"a79","n":25,"town":"Seattle"},{"_id":"A06","n":14},{"_id":"a72","n":10,"town":"Redmond"},{"_id":{"$oid":"0becd7b03898d190f9ebdacc"},"n":15,"town":null},{"_id":"c37","n":16},{"_id":{"$oid":"6cad4a268d116ece1738f7d9"},"n":9,"town":"Redmond"},{"_id":{"$oid":"922766581e27a1c08a6a63ec"},"n":18},{"_id":"a09","n":2,"town":"Redmond"},{"_id":"A53","n":7,"town":"Redmond"},{"_id":{"$oid":"907a70c31012f037b64ce422"},"n":24,"town":"Seattle"},{"_id":"f47","n":22,"town":"Seattle"},{"_id":"b28","n":11,"town":"Redmond"}]'
CREATE FOREIGN TABLE idxgroups (_id text COLLATE "C", town text COLLATE "C",
  n int) SERVER mongo OPTIONS (database 'idxtable_writes',
  collection 'idxorder_groups');
CREATE TEMP TABLE idxgroups_local AS SELECT * FROM idxgroups;
SELECT idxtable.create_index('idxgroups', '{town}', name => 'idxgroups_town');
ANALYZE idxgroups;
SET idxtable.enable_plain_scan = off;
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT _id, town FROM idxgroups ORDER BY town, _id LIMIT 3;
SELECT _id, town FROM idxgroups ORDER BY town, _id LIMIT 3;
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT _id, n FROM idxgroups WHERE town = 'Seattle' ORDER BY _id LIMIT 2;
CREATE FUNCTION idxgroups_same(query text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  routed text;
  heap text;
BEGIN
  EXECUTE format('SELECT string_agg(t::text, '' '') FROM (%s) t', query) INTO routed;
  EXECUTE format('SELECT string_agg(t::text, '' '') FROM (%s) t',
                 replace(query, 'FROM idxgroups ', 'FROM idxgroups_local ')) INTO heap;
  RETURN CASE WHEN routed IS NOT DISTINCT FROM heap THEN 'same: ' ELSE 'DIFFERENT: ' END || query;
END $$;
-- batches of 3 entries and 2 facts: every group of more than 3 entries is
-- read apart, whatever the LIMIT and OFFSET (or none)
ALTER FOREIGN TABLE idxgroups OPTIONS (ADD fetch_size '3', ADD fetch_batch_size '2');
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT _id, town FROM idxgroups ORDER BY town DESC NULLS LAST, _id;
SELECT idxgroups_same(q) FROM (VALUES
  ('SELECT _id, town FROM idxgroups ORDER BY town, _id'),
  ('SELECT _id, town FROM idxgroups ORDER BY town NULLS FIRST, _id'),
  ('SELECT _id, town FROM idxgroups ORDER BY town DESC, _id'),
  ('SELECT _id, town FROM idxgroups ORDER BY town DESC NULLS LAST, _id'),
  ('SELECT _id, town FROM idxgroups ORDER BY town, _id LIMIT 3'),
  ('SELECT _id, town FROM idxgroups ORDER BY town, _id LIMIT 3 OFFSET 11'),
  ('SELECT _id, town FROM idxgroups ORDER BY town, _id LIMIT 4 OFFSET 13'),
  ('SELECT _id, town FROM idxgroups ORDER BY town, _id LIMIT 3 OFFSET 22'),
  ('SELECT _id, town FROM idxgroups ORDER BY town NULLS FIRST, _id LIMIT 3'),
  ('SELECT _id, town FROM idxgroups ORDER BY town NULLS FIRST, _id LIMIT 4 OFFSET 7'),
  ('SELECT _id, town FROM idxgroups ORDER BY town DESC, _id LIMIT 2'),
  ('SELECT _id, town FROM idxgroups ORDER BY town DESC, _id LIMIT 4 OFFSET 7'),
  ('SELECT _id, town FROM idxgroups ORDER BY town DESC NULLS LAST, _id LIMIT 3 OFFSET 9'),
  ('SELECT _id, town FROM idxgroups ORDER BY town DESC NULLS LAST, _id LIMIT 4 OFFSET 20'),
  ('SELECT _id, n FROM idxgroups WHERE town = ''Redmond'' ORDER BY _id LIMIT 3'),
  ('SELECT _id, n FROM idxgroups WHERE town = ''Redmond'' ORDER BY _id LIMIT 3 OFFSET 8'),
  ('SELECT _id, n FROM idxgroups WHERE town = ''Seattle'' ORDER BY _id LIMIT 2'),
  ('SELECT _id, n FROM idxgroups WHERE town IS NULL ORDER BY _id LIMIT 3 OFFSET 4'),
  ('SELECT _id, town FROM idxgroups WHERE town IS NULL OR town > ''B'' ORDER BY town, _id LIMIT 3 OFFSET 20'),
  ('SELECT _id, town FROM idxgroups WHERE town IS NULL OR town > ''B'' ORDER BY town DESC, _id LIMIT 3 OFFSET 7'),
  ('SELECT _id, town FROM idxgroups WHERE town IN (''Redmond'', ''Tacoma'') ORDER BY town, _id LIMIT 3 OFFSET 11'),
  ('SELECT _id, town FROM idxgroups WHERE town >= ''Redmond'' ORDER BY town DESC, _id LIMIT 3 OFFSET 8')
) AS v(q);
-- an entry whose fact's _id is neither a string nor an ObjectId: the
-- group is read whole, and its _id fails to convert as before
\! /usr/bin/python3 test/fixtures/documents.py insert idxtable.idxorder_groups.idxgroups_town '{"_id":{"k0":"Seattle","id":42},"id":42}'
SELECT _id, n FROM idxgroups WHERE town = 'Seattle' ORDER BY _id LIMIT 2;
\! /usr/bin/python3 test/fixtures/documents.py delete idxtable.idxorder_groups.idxgroups_town '{"id":42}'
SELECT _id, n FROM idxgroups WHERE town = 'Seattle' ORDER BY _id LIMIT 2;
-- a rescan for each outer row: each group read apart starts over
SELECT v.t, s._id FROM (VALUES ('Redmond'), (NULL), ('Redmond')) v(t),
  LATERAL (SELECT _id FROM idxgroups WHERE town IS NOT DISTINCT FROM v.t
           ORDER BY _id LIMIT 2) s;
-- a unique index: its NULL entries (the only group of more than one)
SELECT idxtable.drop_index('idxgroups_town');
DELETE FROM idxgroups WHERE town IS NOT NULL AND _id NOT IN ('b30', 'b70', '046');
DELETE FROM idxgroups_local WHERE town IS NOT NULL AND _id NOT IN ('b30', 'b70', '046');
SELECT idxtable.create_index('idxgroups', '{town}', name => 'idxgroups_utown', is_unique => true);
SELECT idxgroups_same(q) FROM (VALUES
  ('SELECT _id, town FROM idxgroups ORDER BY town, _id LIMIT 3 OFFSET 2'),
  ('SELECT _id, town FROM idxgroups ORDER BY town NULLS FIRST, _id LIMIT 2 OFFSET 8'),
  ('SELECT _id, n FROM idxgroups WHERE town IS NULL ORDER BY _id LIMIT 3'),
  ('SELECT _id, town FROM idxgroups ORDER BY town DESC NULLS LAST, _id')
) AS v(q);
SELECT idxtable.drop_index('idxgroups_utown');
DROP FOREIGN TABLE idxgroups;
-- integer _ids (int32, int64 and doubles of integers, compared by value)
\! /usr/bin/python3 test/fixtures/documents.py delete idxorder_groups '{}' > /dev/null
\! /usr/bin/python3 test/fixtures/documents.py insert idxorder_groups '[{"_id":{"$numberDouble":"-2.0"},"n":10,"town":"Redmond"},{"_id":{"$numberDouble":"69.0"},"n":6,"town":"Redmond"},{"_id":111,"n":15},{"_id":168,"n":8,"town":"Redmond"},{"_id":157,"n":24,"town":"Seattle"},{"_id":186,"n":4,"town":"Redmond"},{"_id":-3,"n":11,"town":"Redmond"},{"_id":{"$numberDouble":"-26.0"},"n":18},{"_id":80,"n":7,"town":"Redmond"},{"_id":{"$numberLong":"81"},"n":13},{"_id":{"$numberLong":"100"},"n":9,"town":"Redmond"},{"_id":87,"n":23,"town":"Seattle"},{"_id":169,"n":3,"town":"Redmond"},{"_id":{"$numberLong":"-14"},"n":21,"town":"Seattle"},{"_id":{"$numberLong":"153"},"n":17},{"_id":{"$numberDouble":"93.0"},"n":2,"town":"Redmond"},{"_id":107,"n":16},{"_id":65,"n":0,"town":"Redmond"},{"_id":{"$numberLong":"149"},"n":5,"town":"Redmond"},{"_id":{"$numberDouble":"71.0"},"n":14},{"_id":155,"n":12},{"_id":64,"n":19},{"_id":{"$numberLong":"171"},"n":1,"town":"Redmond"},{"_id":27,"n":20,"town":"Seattle"},{"_id":{"$numberDouble":"-27.0"},"n":22,"town":"Seattle"}]'
CREATE FOREIGN TABLE idxgroups (_id bigint, town text COLLATE "C", n int)
  SERVER mongo OPTIONS (database 'idxtable_writes',
  collection 'idxorder_groups');
DROP TABLE idxgroups_local;
CREATE TEMP TABLE idxgroups_local AS SELECT * FROM idxgroups;
SELECT idxtable.create_index('idxgroups', '{town}', name => 'idxgroups_town');
ANALYZE idxgroups;
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT _id, n FROM idxgroups WHERE town = 'Redmond' ORDER BY _id LIMIT 3;
ALTER FOREIGN TABLE idxgroups OPTIONS (ADD fetch_size '3', ADD fetch_batch_size '2');
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT _id, town FROM idxgroups ORDER BY town DESC, _id;
SELECT idxgroups_same(q) FROM (VALUES
  ('SELECT _id, town FROM idxgroups ORDER BY town, _id'),
  ('SELECT _id, town FROM idxgroups ORDER BY town DESC, _id'),
  ('SELECT _id, town FROM idxgroups ORDER BY town, _id LIMIT 3'),
  ('SELECT _id, town FROM idxgroups ORDER BY town, _id LIMIT 3 OFFSET 10'),
  ('SELECT _id, town FROM idxgroups ORDER BY town DESC NULLS LAST, _id LIMIT 3 OFFSET 15'),
  ('SELECT _id, town FROM idxgroups ORDER BY town NULLS FIRST, _id LIMIT 3 OFFSET 6'),
  ('SELECT _id, n FROM idxgroups WHERE town = ''Redmond'' ORDER BY _id LIMIT 4 OFFSET 5')
) AS v(q);
RESET idxtable.enable_plain_scan;
DROP FUNCTION idxgroups_same(text);
SELECT idxtable.drop_index('idxgroups_town');
DROP FOREIGN TABLE idxgroups;
DROP TABLE idxgroups_local;
