--
-- sync: the change-stream applier's processes and views (the library is in
-- shared_preload_libraries, as test/env starts PostgreSQL).  A server of
-- this file's own gives its (server, owner) pair an applier slot of its own.
--
\set server syncsrv
\set mongo_database idxtable_regress
\i test/fixtures/server.sql
CREATE FOREIGN TABLE sync_people (id int OPTIONS (field '_id'), town text)
  SERVER syncsrv OPTIONS (collection 'people');

-- the settings and the views' columns
SHOW idxtable.launcher_naptime;
SELECT attname, format_type(atttypid, atttypmod)
  FROM pg_attribute
 WHERE attrelid = 'idxtable.sync_status'::regclass AND attnum > 0
 ORDER BY attnum;
SELECT attname, format_type(atttypid, atttypmod)
  FROM pg_attribute
 WHERE attrelid = 'idxtable.appliers'::regclass AND attnum > 0
 ORDER BY attnum;

-- a rolled-back create_index expects no applier
BEGIN;
SELECT idxtable.create_index('sync_people', '{town}', name => 'sync_town');
ROLLBACK;
SELECT count(*) FROM idxtable.appliers WHERE server = 'syncsrv';

-- a committed one claims its applier's slot at commit, before the applier
-- process exists; its index has a row in sync_status
SELECT idxtable.create_index('sync_people', '{town}', name => 'sync_town');
SELECT owner = current_user AS owner_ok,
       state IN ('starting', 'running', 'waiting') AS applier_coming
  FROM idxtable.appliers WHERE server = 'syncsrv';
SELECT name, state FROM idxtable.sync_status WHERE name = 'sync_town';

-- the applier process comes (within 20 s), named after idxtable_fdw
DO $$
BEGIN
  FOR i IN 1..200 LOOP
    EXIT WHEN EXISTS (SELECT FROM idxtable.appliers
                       WHERE server = 'syncsrv' AND pid IS NOT NULL);
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
SELECT a.backend_type, a.application_name, a.datname = current_database() AS here
  FROM pg_stat_activity a JOIN idxtable.appliers s USING (pid)
 WHERE s.server = 'syncsrv';

-- everyone may read the views
CREATE ROLE regress_sync_reader;
SET ROLE regress_sync_reader;
SELECT name FROM idxtable.sync_status WHERE name = 'sync_town';
SELECT count(*) FROM idxtable.appliers WHERE server = 'syncsrv';
RESET ROLE;
DROP ROLE regress_sync_reader;

-- a fact written straight into MongoDB is applied: its entry appears in
-- the index collection (within 10 s; found through the index with 'any',
-- which does not wait for the applier)
\! /usr/bin/python3 test/fixtures/documents.py delete sync_out '{}' >/dev/null
CREATE FOREIGN TABLE sync_out (_id text, town text)
  SERVER syncsrv OPTIONS (database 'idxtable_writes', collection 'sync_out');
INSERT INTO sync_out VALUES ('1', 'Oslo');
SELECT idxtable.create_index('sync_out', '{town}', name => 'sync_out_town');
\! /usr/bin/python3 test/fixtures/documents.py insert sync_out '{"_id": "2", "town": "Rome"}'
SET idxtable.index_consistency = 'any';
SET idxtable.enable_plain_scan = off;
DO $$
BEGIN
  FOR i IN 1..100 LOOP
    EXIT WHEN EXISTS (SELECT FROM sync_out WHERE town = 'Rome') AND
              EXISTS (SELECT FROM idxtable.sync_status
                       WHERE name = 'sync_out_town'
                         AND applied_through IS NOT NULL);
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
EXPLAIN (COSTS OFF) SELECT _id FROM sync_out WHERE town = 'Rome';
SELECT _id, town FROM sync_out WHERE town = 'Rome';
RESET idxtable.enable_plain_scan;
RESET idxtable.index_consistency;
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.sync_out.sync_out_town
SELECT name, state, applied_through IS NOT NULL AS applied, last_error
  FROM idxtable.sync_status WHERE name = 'sync_out_town';

-- change_streams 'off': the server's applier goes away (within 20 s), and
-- with index_consistency current its index tables are not routed through;
-- 'on' again: the applier comes back
ALTER SERVER syncsrv OPTIONS (ADD change_streams 'off');
DO $$
BEGIN
  FOR i IN 1..200 LOOP
    EXIT WHEN NOT EXISTS (SELECT FROM idxtable.appliers
                           WHERE server = 'syncsrv');
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
SELECT count(*) FROM idxtable.appliers WHERE server = 'syncsrv';
SET idxtable.enable_plain_scan = off;
EXPLAIN (COSTS OFF) SELECT _id FROM sync_out WHERE town = 'Rome';
RESET idxtable.enable_plain_scan;
-- an index created meanwhile warns and expects no applier
SELECT idxtable.create_index('sync_out', '{lower(town)}', name => 'sync_out_lower');
SELECT count(*) FROM idxtable.appliers WHERE server = 'syncsrv';
SELECT idxtable.drop_index('sync_out_lower');
SELECT show_error($$ALTER SERVER syncsrv OPTIONS (SET change_streams 'maybe')$$);
ALTER SERVER syncsrv OPTIONS (SET change_streams 'on');
DO $$
BEGIN
  FOR i IN 1..200 LOOP
    EXIT WHEN EXISTS (SELECT FROM idxtable.appliers
                       WHERE server = 'syncsrv' AND pid IS NOT NULL);
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
SELECT state FROM idxtable.appliers WHERE server = 'syncsrv';
SELECT idxtable.drop_index('sync_out_town');
DROP FOREIGN TABLE sync_out;

-- without index tables left the applier goes away (within 20 s)
SELECT idxtable.drop_index('sync_town');
DO $$
BEGIN
  FOR i IN 1..200 LOOP
    EXIT WHEN NOT EXISTS (SELECT FROM idxtable.appliers
                           WHERE server = 'syncsrv');
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
SELECT count(*) FROM idxtable.appliers WHERE server = 'syncsrv';
SELECT count(*) FROM idxtable.sync_status WHERE name = 'sync_town';

SET client_min_messages = warning;
DROP SERVER syncsrv CASCADE;
RESET client_min_messages;
