--
-- build: the cluster time an index's change stream starts from
-- (index_defs.sync_from), idxtable.rebuild_index(), the procedure
-- idxtable.create_index_concurrently() and the state 'stale'.
--
\! /usr/bin/python3 test/fixtures/documents.py drop
-- the table is on server mongo_nostream (change_streams 'off', see setup):
-- no applier, so reads route through its indexes only with 'any'
SET idxtable.index_consistency = 'any';
CREATE FOREIGN TABLE bld (_id text, name text, town text, n int)
  SERVER mongo_nostream OPTIONS (database 'idxtable_writes', collection 'bld');
INSERT INTO bld SELECT i::text, 'name' || i,
                       CASE WHEN i % 2 = 0 THEN 'Oslo' ELSE 'Rome' END, i
                  FROM generate_series(1, 40) i;

-- create_index notes the cluster time before it reads the facts: a
-- MongoDB Timestamp packed as (seconds << 32) | increment, near now
SELECT idxtable.create_index('bld', '{town}', name => 'bld_town');
SELECT sync_from AS town_sync FROM idxtable.index_defs
 WHERE name = 'bld_town' \gset
SELECT :town_sync > 0 AS known,
       abs((:town_sync >> 32) - extract(epoch FROM now())) < 300 AS near_now;
SELECT idxtable.create_index('bld', '{lower(name)}', is_unique => true,
                             name => 'bld_name');
SELECT sync_from > :town_sync AS increasing FROM idxtable.index_defs
 WHERE name = 'bld_name';
SELECT pg_typeof(sync_from) FROM idxtable.index_defs WHERE name = 'bld_name';

-- rebuild_index: a full pass over the facts; what was made around the FDW
-- is in the index again, which is valid with a newer sync_from
\! /usr/bin/python3 test/fixtures/documents.py delete idxtable.bld.bld_town '{"id": "1"}'
\! /usr/bin/python3 test/fixtures/documents.py insert bld '{"_id": "41", "name": "Zed", "town": "Oslo", "n": 41}'
\! /usr/bin/python3 test/fixtures/documents.py delete bld '{"_id": "2"}'
SELECT * FROM idxtable.verify_index('bld_town');
SELECT idxtable.rebuild_index('bld_town');
SELECT state, entries, sync_from > :town_sync AS newer_sync
  FROM idxtable.index_defs WHERE name = 'bld_town';
SELECT * FROM idxtable.verify_index('bld_town');
SELECT idxtable.rebuild_index('bld_name');
SELECT state, entries, distinct_keys FROM idxtable.index_defs
 WHERE name = 'bld_name';

-- 'stale' (set by the applier when a stream cannot resume; here by the
-- superuser): writes maintain the index, reads are not routed through it
UPDATE idxtable.index_defs SET state = 'stale' WHERE name = 'bld_town';
SELECT name, state FROM idxtable.indexes WHERE "table" = 'bld'::regclass
 ORDER BY name;
SET idxtable.enable_plain_scan = off;
EXPLAIN (COSTS OFF) SELECT _id FROM bld WHERE town = 'Oslo';
INSERT INTO bld VALUES ('42', 'Amy', 'Lima', 42);
UPDATE bld SET town = 'Lima' WHERE _id = '4';
\! /usr/bin/python3 test/fixtures/documents.py count idxtable.bld.bld_town '{"_id.k0": "Lima"}'
SELECT show_error($$SELECT * FROM idxtable.verify_index('bld_town')$$);
-- rebuild_index makes it valid again, and routed
SELECT idxtable.rebuild_index('bld_town');
SELECT state FROM idxtable.indexes WHERE name = 'bld_town';
EXPLAIN (COSTS OFF) SELECT _id FROM bld WHERE town = 'Lima';
SELECT _id FROM bld WHERE town = 'Lima' ORDER BY _id;
RESET idxtable.enable_plain_scan;

-- rebuild_index: the owner only (checked before the lock), a valid name
CREATE ROLE regress_bld_reader;
GRANT SELECT ON bld TO regress_bld_reader;
SET ROLE regress_bld_reader;
SELECT show_error($$SELECT idxtable.rebuild_index('bld_town')$$);
RESET ROLE;
SELECT show_error($$SELECT idxtable.rebuild_index('no_such_index')$$);
SELECT idxtable.rebuild_index(NULL) IS NULL AS strict;

-- create_index_concurrently: a procedure that commits, so not in a
-- transaction block nor in a function
BEGIN;
CALL idxtable.create_index_concurrently('bld', '{n}', name => 'bld_n');
ROLLBACK;
SELECT show_error($$CALL idxtable.create_index_concurrently('bld', '{n}')$$);
SELECT count(*) FROM idxtable.indexes WHERE name = 'bld_n';
CALL idxtable.create_index_concurrently('bld', '{n}', include => '{name}',
                                        name => 'bld_n');
SELECT state, entries, sync_from > :town_sync AS has_sync_from
  FROM idxtable.index_defs WHERE name = 'bld_n';
SELECT * FROM idxtable.verify_index('bld_n');
SET idxtable.enable_plain_scan = off;
EXPLAIN (COSTS OFF) SELECT name FROM bld WHERE n = 7;
SELECT name FROM bld WHERE n = 7;
RESET idxtable.enable_plain_scan;
-- a default name, and the writes after it are maintained
CALL idxtable.create_index_concurrently('bld', '{name}');
SELECT name, state FROM idxtable.indexes WHERE name LIKE 'bld_name_idx%';
DELETE FROM bld WHERE _id = '5';
SELECT * FROM idxtable.verify_index('bld_name_idx');
-- the table must be the owner's
SET ROLE regress_bld_reader;
CALL idxtable.create_index_concurrently('bld', '{town}');
RESET ROLE;
-- a build that fails leaves the definition 'failed', for drop_index
CALL idxtable.create_index_concurrently('bld', '{town}', is_unique => true,
                                        name => 'bld_town_u');
SELECT state FROM idxtable.indexes WHERE name = 'bld_town_u';
SELECT show_error($$SELECT idxtable.rebuild_index('bld_town_u')$$);
SELECT idxtable.drop_index('bld_town_u');
\! /usr/bin/python3 test/fixtures/documents.py count idxtable.bld.bld_town_u '{}'

DROP FOREIGN TABLE bld;
DROP ROLE regress_bld_reader;
