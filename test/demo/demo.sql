\set ECHO queries
\pset footer off
\echo '\n>>> idxtable_fdw demo: MongoDB collections as PostgreSQL foreign tables'
CREATE EXTENSION IF NOT EXISTS idxtable_fdw;
-- (the server and user mapping come from test/env's MONGO_* variables;
-- not echoed, since the user mapping holds a password)
\set ECHO none
\set server demo_mongo
\set mongo_database idxtable_demo
\ir ../fixtures/server.sql
\set ECHO queries
CREATE FOREIGN TABLE customers (
  customer_id int OPTIONS (field '_id'),
  town text, last_name text, first_name text, email text
) SERVER demo_mongo OPTIONS (collection 'customers');
ANALYZE customers;

\echo '\n>>> a lookup by the document key: MongoDB''s _id index, one round trip'
EXPLAIN (ANALYZE, VERBOSE, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT * FROM customers WHERE customer_id = 4242;
SELECT * FROM customers WHERE customer_id IN (1, 2, 3) ORDER BY customer_id;

\echo '\n>>> index tables: companion collections key -> customer _id, built by the FDW'
CREATE INDEX ON customers (town, last_name);
CREATE UNIQUE INDEX ON customers (lower(email));
CREATE INDEX ON customers (last_name) INCLUDE (first_name);
-- \d customers does not list them: idxtable.indexes does, as pg_indexes would
SELECT indexname, indexdef, collection, state, entries FROM idxtable.indexes
  WHERE tablename = 'customers';

\echo '\n>>> composite key: one lookup in the index collection, one fetch of the facts by _id'
EXPLAIN (ANALYZE, VERBOSE, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT customer_id, first_name FROM customers
  WHERE town = 'Walla Walla' AND last_name = 'Smith';
SELECT customer_id, first_name, last_name FROM customers
  WHERE town = 'Walla Walla' AND last_name = 'Smith' ORDER BY customer_id;

\echo '\n>>> case-insensitive unique key, and a covering index that needs no fact at all'
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT customer_id FROM customers WHERE lower(email) = 'tim.davis4242@example.com';
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT first_name, count(*) FROM customers WHERE last_name = 'Kim' GROUP BY first_name;

\echo '\n>>> a skewed key: the common town is cheaper to scan, a rare one goes through the index'
EXPLAIN (COSTS OFF) SELECT count(email) FROM customers WHERE town = 'Redmond';
EXPLAIN (COSTS OFF) SELECT count(email) FROM customers WHERE town = 'Pullman';

\echo '\n>>> the same query without routing: a MongoDB find with the pushed-down filter'
SET idxtable.enable_index_routing = off;
EXPLAIN (ANALYZE, VERBOSE, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT customer_id, first_name FROM customers
  WHERE town = 'Walla Walla' AND last_name = 'Smith';
RESET idxtable.enable_index_routing;

\echo '\n>>> NULL and missing fields follow SQL semantics'
EXPLAIN (VERBOSE, COSTS OFF) SELECT count(*) FROM customers WHERE email IS NULL;
SELECT count(*) FROM customers WHERE email IS NULL;
SELECT count(*) FROM customers WHERE NOT (town <> 'Pullman');

\echo '\n>>> what MongoDB would compare differently stays in PostgreSQL (Filter:)'
EXPLAIN (VERBOSE, COSTS OFF)
  SELECT customer_id FROM customers WHERE lower(email) LIKE 'ada.kim%';
SELECT town, count(*) FROM customers GROUP BY town ORDER BY count(*) DESC LIMIT 5;

\echo '\n>>> writes keep every index table current, in one MongoDB transaction per PostgreSQL transaction'
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
  INSERT INTO customers VALUES (900001, 'Pullman', 'Lovelace', 'Ada', 'Ada@Example.org');
SELECT customer_id, first_name FROM customers WHERE lower(email) = 'ada@example.org';
\echo '\n>>> the unique key holds, case-insensitively (SQLSTATE 23505), and nothing of the statement remains'
\set ON_ERROR_STOP 0
INSERT INTO customers VALUES (900002, 'Pullman', 'King', 'Augusta', 'ADA@example.ORG');
\set ON_ERROR_STOP 1
SELECT count(*) FROM customers WHERE customer_id = 900002;
\echo '\n>>> an UPDATE of a key moves its index entries; verify_index compares index and facts'
UPDATE customers SET town = 'Seattle', last_name = 'King' WHERE customer_id = 900001;
SELECT customer_id, town FROM customers WHERE town = 'Seattle' AND last_name = 'King' AND first_name = 'Ada';
SELECT name, (idxtable.verify_index(name)).* FROM idxtable.indexes ORDER BY name;
DELETE FROM customers WHERE customer_id = 900001;

\echo '\n>>> other applications write to MongoDB directly: a background worker, the applier, follows'
\echo '>>> MongoDB''s change stream and brings every index table up to date (idxtable_fdw is preloaded)'
SELECT backend_type, count(*) FROM pg_stat_activity
  WHERE backend_type LIKE 'idxtable_fdw%' AND (datname IS NULL OR datname = current_database())
  GROUP BY backend_type ORDER BY backend_type;
\set ECHO none
-- not shown: wait (at most 30 s) until the applier follows every index table
DO $$
BEGIN
  FOR i IN 1..300 LOOP
    EXIT WHEN NOT EXISTS (SELECT FROM idxtable.sync_status WHERE lag IS NULL);
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
SELECT bool_and(lag IS NOT NULL) AS streaming FROM idxtable.sync_status \gset
\if :streaming
\else
\echo '(the applier does not follow every index table: is idxtable_fdw in shared_preload_libraries?)'
\endif
\set ECHO queries
\echo '\n>>> idxtable.sync_status before: the FDW''s own writes above came through the stream too, with nothing left to write'
SELECT name, state, lag IS NOT NULL AS streaming, events_applied, entries_written,
       conflicts, last_error
  FROM idxtable.sync_status ORDER BY name;
\! /usr/bin/python3 test/demo/outside_writes.py
\echo '\n>>> the very next query through an index table finds them: with idxtable.index_consistency'
\echo '>>> = current (the default) a routed scan first waits until the applier has applied every write'
\echo '>>> MongoDB acknowledged before the query started (Sync Wait)'
EXPLAIN (ANALYZE, COSTS OFF, SUMMARY OFF)
  SELECT customer_id, first_name FROM customers
  WHERE town = 'Walla Walla' AND last_name = 'Lovelace';
SELECT customer_id, first_name, last_name, town, email FROM customers
  WHERE town = 'Walla Walla' AND last_name = 'Lovelace' ORDER BY customer_id;
SELECT customer_id, email FROM customers WHERE lower(email) = 'grace.hopper@navy.example';
SELECT customer_id, email FROM customers WHERE lower(email) = 'ada.lovelace@engine.example';
SELECT count(*) AS old_key_left FROM customers WHERE lower(email) = 'tim.davis4242@example.com';
\echo '\n>>> idxtable.sync_status after: the outside writes applied, and the index entries written for them'
SELECT name, state, lag, events_applied, entries_written, conflicts, last_error
  FROM idxtable.sync_status ORDER BY name;
SELECT name, (idxtable.verify_index(name)).* FROM idxtable.indexes ORDER BY name;

\echo '\n>>> IMPORT FOREIGN SCHEMA infers the columns from sampled documents'
CREATE SCHEMA imported;
IMPORT FOREIGN SCHEMA idxtable_demo FROM SERVER demo_mongo INTO imported;
\d imported.customers
