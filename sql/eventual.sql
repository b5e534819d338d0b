--
-- eventual: consistency 'eventual' writes the facts only; the change-stream
-- applier maintains the index tables.  Unique index tables are refused.
-- What MongoDB holds is checked with test/fixtures/documents.py and
-- test/fixtures/index_collections.py, independently of the FDW.
--
\! /usr/bin/python3 test/fixtures/documents.py drop

-- the option: on servers and tables; other values are refused
CREATE SERVER ev_server FOREIGN DATA WRAPPER idxtable_fdw
  OPTIONS (uri 'mongodb://localhost', consistency 'eventual');
SELECT show_error($$CREATE SERVER ev_bad FOREIGN DATA WRAPPER idxtable_fdw
  OPTIONS (uri 'mongodb://localhost', consistency 'later')$$);
SELECT show_error($$ALTER SERVER ev_server OPTIONS (SET consistency 'Eventual')$$);
DROP SERVER ev_server;

CREATE FOREIGN TABLE ev (_id text, name text, town text, tags text[], n int)
  SERVER mongo OPTIONS (database 'idxtable_writes', collection 'ev',
                        consistency 'eventual');
INSERT INTO ev VALUES ('1', 'Alice', 'Oslo', '{a,b}', 1),
                      ('2', 'Bob', 'Rome', '{b,c}', 2);

-- non-unique index tables can be created; a unique one is refused
SELECT idxtable.create_index('ev', '{town}', include => '{n}', name => 'ev_town');
SELECT idxtable.create_index('ev', '{tags}', name => 'ev_tags');
SELECT show_error($$SELECT idxtable.create_index('ev', '{lower(name)}', is_unique => true, name => 'ev_name')$$);
\! /usr/bin/python3 test/fixtures/index_collections.py idxtable_writes
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.ev.ev_town
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.ev.ev_tags

-- writes change the facts only: the index collections stay as they were.
-- (The applier, whose appName is "idxtable_fdw applier", is kept from
-- writing index entries meanwhile, so that what MongoDB holds shows it.)
\! /usr/bin/python3 test/fixtures/failpoint.py insert,update,delete 2 --skip 0 --app 'idxtable_fdw applier'
INSERT INTO ev VALUES ('3', 'Carol', 'Oslo', '{c}', 3);
UPDATE ev SET town = 'Paris', tags = '{x}' WHERE _id = '1';
DELETE FROM ev WHERE _id = '2';
COPY ev FROM stdin;
4	Dave	Rome	{d}	4
\.
SELECT clock_timestamp() AS written \gset
\! /usr/bin/python3 test/fixtures/documents.py show ev
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.ev.ev_town
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.ev.ev_tags
\! /usr/bin/python3 test/fixtures/failpoint.py off

-- the applier brings them up to date: once it has applied the stream past
-- the writes, the entries are there
CREATE FUNCTION ev_caught_up(since timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..1200 LOOP
    IF (SELECT bool_and(applied_through >= since AND lag IS NOT NULL)
          FROM idxtable.sync_status WHERE name IN ('ev_town', 'ev_tags')) THEN
      RETURN true;
    END IF;
    PERFORM pg_sleep(0.1);
  END LOOP;
  RETURN false;
END $$;
SELECT ev_caught_up(:'written');
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.ev.ev_town
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.ev.ev_tags
SELECT name, state, last_error FROM idxtable.sync_status
  WHERE name LIKE 'ev%' ORDER BY name;

-- routed reads with index_consistency 'current' wait for the applier, so
-- they see a write at once
SET idxtable.index_consistency = current;
SET idxtable.enable_plain_scan = off;
EXPLAIN (COSTS OFF) SELECT _id, n FROM ev WHERE town = 'Oslo';
SELECT _id, n FROM ev WHERE town = 'Oslo' ORDER BY _id;
INSERT INTO ev VALUES ('8', 'Hal', 'Lima', '{h}', 8);
SELECT _id, n FROM ev WHERE town = 'Lima';
UPDATE ev SET tags = '{h,i}' WHERE _id = '8';
SELECT _id FROM ev WHERE 'i' = ANY (tags);
DELETE FROM ev WHERE _id = '8';
SELECT _id FROM ev WHERE town = 'Lima';
RESET idxtable.enable_plain_scan;

-- EXPLAIN shows the mode and no index table maintained by the write
EXPLAIN (COSTS OFF) UPDATE ev SET n = 5 WHERE _id = '3';
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  UPDATE ev SET town = 'Oslo', n = 5 WHERE _id = '3';
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  INSERT INTO ev VALUES ('5', 'Eve', 'Oslo', '{e}', 5), ('6', 'Finn', NULL, NULL, 6);

-- each write is final when made, as in mode 'ordered': a statement that
-- fails in a write is undone (no row 7 remains) ...
INSERT INTO ev VALUES ('7', 'Gus', 'Oslo', '{g}', 7), ('1', 'again', 'Oslo', '{}', 1);
SELECT _id FROM ev ORDER BY _id;
-- ... an error elsewhere in the statement leaves the batches of UPDATE and
-- DELETE written before it (here none: the first is not full yet), and a
-- rollback leaves the writes with a WARNING
SELECT show_error($$UPDATE ev SET n = n + 100 WHERE n < 10 AND 1 / (n - 6) IS NOT NULL$$);
SELECT _id, name, town, n FROM ev ORDER BY _id;
BEGIN;
DELETE FROM ev WHERE _id = '6';
ROLLBACK;
SELECT _id FROM ev ORDER BY _id;

-- UPDATE and DELETE go in batches (one find of the facts for the undo, one
-- bulk write); a batch that fails undoes the batches written before it
ALTER FOREIGN TABLE ev OPTIONS (ADD batch_size '2');
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  UPDATE ev SET n = n + 1;
\! /usr/bin/python3 test/fixtures/failpoint.py update 2 --skip 1
UPDATE ev SET n = n + 1000, town = 'Bern';
\! /usr/bin/python3 test/fixtures/failpoint.py off
\! /usr/bin/python3 test/fixtures/failpoint.py delete 2 --skip 1
DELETE FROM ev WHERE n < 100;
\! /usr/bin/python3 test/fixtures/failpoint.py off
\! /usr/bin/python3 test/fixtures/documents.py show ev
-- a batch of one row is one findAndModify
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  DELETE FROM ev WHERE _id = '5';
DELETE FROM ev WHERE n > 5;
SELECT _id, n FROM ev ORDER BY _id;

-- a unique index table on an eventual table is refused at the first write
CREATE FOREIGN TABLE ev_u (_id text, email text)
  SERVER mongo OPTIONS (database 'idxtable_writes', collection 'ev_u');
SELECT idxtable.create_index('ev_u', '{email}', is_unique => true, name => 'ev_u_email');
ALTER FOREIGN TABLE ev_u OPTIONS (ADD consistency 'eventual');
SELECT show_error($$INSERT INTO ev_u VALUES ('1', 'a@example.com')$$);
SELECT show_error($$UPDATE ev_u SET email = 'b@example.com'$$);
SELECT show_error($$DELETE FROM ev_u$$);
\! /usr/bin/python3 test/fixtures/documents.py show ev_u
-- in any other mode the write goes through
ALTER FOREIGN TABLE ev_u OPTIONS (SET consistency 'ordered');
INSERT INTO ev_u VALUES ('1', 'a@example.com');
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.ev_u.ev_u_email
SELECT idxtable.drop_index('ev_u_email');
ALTER FOREIGN TABLE ev_u OPTIONS (SET consistency 'eventual');
INSERT INTO ev_u VALUES ('2', 'b@example.com');
SELECT * FROM ev_u ORDER BY _id;

-- the server's option counts where the table has none
\set server ev_srv
\set mongo_database idxtable_writes
\set server_options ', consistency \'eventual\''
\i test/fixtures/server.sql
CREATE FOREIGN TABLE ev_s (_id text, email text)
  SERVER ev_srv OPTIONS (collection 'ev_u');
SELECT show_error($$SELECT idxtable.create_index('ev_s', '{email}', is_unique => true)$$);
SELECT idxtable.create_index('ev_s', '{email}', name => 'ev_s_email');
DELETE FROM ev_s WHERE _id = '2';
SELECT * FROM ev_s;

SELECT idxtable.drop_index('ev_s_email');
SELECT idxtable.drop_index('ev_town');
SELECT idxtable.drop_index('ev_tags');
DROP FOREIGN TABLE ev, ev_u, ev_s;
DROP SERVER ev_srv CASCADE;
\! /usr/bin/python3 test/fixtures/index_collections.py idxtable_writes
