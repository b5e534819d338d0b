--
-- sync: the change-stream applier's processes and views (the library is in
-- shared_preload_libraries, as test/env starts PostgreSQL).  A server of
-- this file's own gives its (server, owner) pair an applier slot of its own.
--
\getenv mongo_uri MONGO_URI
\getenv mongo_user MONGO_USER
\getenv mongo_password MONGO_PASSWORD
CREATE SERVER syncsrv FOREIGN DATA WRAPPER idxtable_fdw
  OPTIONS (uri :'mongo_uri', database 'idxtable_regress');
SELECT coalesce(:'mongo_user', '') <> '' AS have_user \gset
\if :have_user
CREATE USER MAPPING FOR CURRENT_USER SERVER syncsrv
  OPTIONS (username :'mongo_user', password :'mongo_password');
\else
CREATE USER MAPPING FOR CURRENT_USER SERVER syncsrv;
\endif
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
