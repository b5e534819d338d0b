--
-- verify: idxtable.verify_index() finds what an interrupted write or a
-- change made around the FDW leaves in index collections, and
-- idxtable.repair_index() fixes it.  The drift is made with
-- test/fixtures/documents.py, directly in MongoDB.
--
\! /usr/bin/python3 test/fixtures/documents.py drop
-- the table is on server mongo_nostream (change_streams 'off', see setup):
-- no applier, so reads route through its indexes only with 'any'
SET idxtable.index_consistency = 'any';
CREATE FOREIGN TABLE vfy (_id text, name text, town text, tags text[], n int)
  SERVER mongo_nostream OPTIONS (database 'idxtable_writes', collection 'vfy',
                        consistency 'ordered');
SELECT idxtable.create_index('vfy', '{lower(name)}', is_unique => true, name => 'vfy_name');
SELECT idxtable.create_index('vfy', '{town}', include => '{n}', name => 'vfy_town');
SELECT idxtable.create_index('vfy', '{tags}', name => 'vfy_tags');
INSERT INTO vfy VALUES ('1', 'Ann', 'Oslo', '{a,b}', 1), ('2', 'Ben', 'Rome', '{b}', 2),
                       ('3', 'Cid', 'Oslo', NULL, 3), ('4', 'Dee', NULL, '{d}', 4),
                       ('5', NULL, 'Lima', '{}', 5);
-- indexes the FDW maintained: every fact checked, nothing found
SELECT * FROM idxtable.verify_index('vfy_name');
SELECT * FROM idxtable.verify_index('vfy_town');
SELECT * FROM idxtable.verify_index('vfy_tags');

-- missing: a fact written around the FDW (its name DEE is claimed by fact
-- 4, which no longer has it), an entry deleted
\! /usr/bin/python3 test/fixtures/documents.py insert vfy '{"_id": "6", "name": "DEE", "town": "Kiev", "tags": ["e"], "n": 6}'
\! /usr/bin/python3 test/fixtures/documents.py set vfy '{"_id": "4"}' '{"name": "Dora"}'
\! /usr/bin/python3 test/fixtures/documents.py delete idxtable.vfy.vfy_town '{"id": "1"}'
-- orphan: entries whose fact is gone
\! /usr/bin/python3 test/fixtures/documents.py delete vfy '{"_id": "2"}'
-- stale: a key the fact does not have, an included value that changed
\! /usr/bin/python3 test/fixtures/documents.py entry idxtable.vfy.vfy_tags zz 3
\! /usr/bin/python3 test/fixtures/documents.py set idxtable.vfy.vfy_town '{"id": "3"}' '{"v.i0": 30}'
SELECT * FROM idxtable.verify_index('vfy_name');
SELECT * FROM idxtable.verify_index('vfy_town');
SELECT * FROM idxtable.verify_index('vfy_tags');
-- reads through the indexes recheck facts, so orphans and stale entries do
-- not show; but a fact without its entry cannot be found through the index
SET idxtable.enable_plain_scan = off;
EXPLAIN (COSTS OFF) SELECT _id FROM vfy WHERE town = 'Oslo';
SELECT _id, n FROM vfy WHERE town = 'Oslo' ORDER BY _id;
SELECT _id FROM vfy WHERE 'b' = ANY (tags) OR 'zz' = ANY (tags) ORDER BY _id;
SELECT _id, name FROM vfy WHERE lower(name) IN ('ben', 'dee', 'dora') ORDER BY _id;

-- repair fixes and counts the same; then all is clean
SELECT * FROM idxtable.repair_index('vfy_name');
SELECT * FROM idxtable.repair_index('vfy_town');
SELECT * FROM idxtable.repair_index('vfy_tags');
SELECT * FROM idxtable.verify_index('vfy_name');
SELECT * FROM idxtable.verify_index('vfy_town');
SELECT * FROM idxtable.verify_index('vfy_tags');
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.vfy.vfy_name
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.vfy.vfy_town
SELECT _id, n FROM vfy WHERE town = 'Oslo' ORDER BY _id;
SELECT _id, name FROM vfy WHERE lower(name) IN ('ben', 'dee', 'dora') ORDER BY _id;
RESET idxtable.enable_plain_scan;

-- two facts with one unique key: verify counts the second as a conflict,
-- not as missing; repair cannot fix that, it reports it and leaves it (see
-- conflicts.sql)
\! /usr/bin/python3 test/fixtures/documents.py insert vfy '{"_id": "7", "name": "ANN"}'
SELECT * FROM idxtable.verify_index('vfy_name');
SELECT * FROM idxtable.repair_index('vfy_name');
-- (the entry that lets reads find fact 7 is an orphan once it is gone)
\! /usr/bin/python3 test/fixtures/documents.py delete vfy '{"_id": "7"}'
SELECT * FROM idxtable.repair_index('vfy_name');

-- errors
SELECT show_error($$SELECT * FROM idxtable.verify_index('no_such_index')$$);
SELECT show_error($$SELECT * FROM idxtable.repair_index(NULL)$$) AS strict;
CREATE ROLE regress_vfy_reader;
\set server mongo_nostream
\set mapping_role regress_vfy_reader
\i test/fixtures/user_mapping.sql
GRANT SELECT ON vfy TO regress_vfy_reader;
SET ROLE regress_vfy_reader;
SELECT checked FROM idxtable.verify_index('vfy_town');  -- SELECT is enough
SELECT show_error($$SELECT * FROM idxtable.repair_index('vfy_town')$$);  -- the owner repairs
RESET ROLE;
REVOKE SELECT ON vfy FROM regress_vfy_reader;
SET ROLE regress_vfy_reader;
SELECT show_error($$SELECT * FROM idxtable.verify_index('vfy_town')$$);
RESET ROLE;
DROP USER MAPPING FOR regress_vfy_reader SERVER mongo_nostream;
DROP ROLE regress_vfy_reader;
-- repair writes outside transactions: not in one that has written
CREATE FOREIGN TABLE vfy_txn (_id text, name text)
  SERVER mongo OPTIONS (database 'idxtable_writes', collection 'vfy_txn',
                        consistency 'transaction');
SELECT idxtable.create_index('vfy_txn', '{name}', name => 'vfy_txn_name');
BEGIN;
INSERT INTO vfy_txn VALUES ('1', 'x');
SELECT * FROM idxtable.verify_index('vfy_txn_name');  -- sees the transaction's writes
SELECT * FROM idxtable.repair_index('vfy_txn_name');
ROLLBACK;
SELECT * FROM idxtable.verify_index('vfy_txn_name');
DROP FOREIGN TABLE vfy, vfy_txn;
