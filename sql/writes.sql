--
-- writes: INSERT, UPDATE, DELETE and COPY keep index tables consistent, in
-- both consistency modes.  What MongoDB holds is checked with
-- test/fixtures/documents.py, independently of the FDW.
--
\! /usr/bin/python3 test/fixtures/documents.py drop
-- the table is on server mongo_nostream (change_streams 'off', see setup):
-- no applier, so reads route through its indexes only with 'any'
SET idxtable.index_consistency = 'any';
CREATE FOREIGN TABLE acct (_id text, name text, town text, tags text[], n int)
  SERVER mongo_nostream OPTIONS (database 'idxtable_writes', collection 'acct');
SELECT idxtable.create_index('acct', '{lower(name)}', is_unique => true, name => 'acct_name');
SELECT idxtable.create_index('acct', '{town}', include => '{n}', name => 'acct_town');
SELECT idxtable.create_index('acct', '{tags}', name => 'acct_tags');

-- INSERT: an omitted _id gets a new ObjectId, which RETURNING shows
INSERT INTO acct (name, town, tags, n) VALUES ('Zoe', 'Oslo', '{z}', 0)
  RETURNING length(_id) AS id_length, name;
DELETE FROM acct WHERE name = 'Zoe';
INSERT INTO acct VALUES ('1', 'Alice', 'Oslo', '{a,b}', 1),
                        ('2', 'Bob', 'Rome', '{b,c,b}', 2),
                        ('3', 'Carol', NULL, NULL, NULL);
-- SQL NULL is written as BSON null, by INSERT and UPDATE alike
\! /usr/bin/python3 test/fixtures/documents.py show acct
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.acct.acct_name
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.acct.acct_town
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.acct.acct_tags

-- UPDATE of a key, of an included column, of array elements
UPDATE acct SET town = 'Paris' WHERE _id = '2';
UPDATE acct SET n = 10 WHERE _id = '1';
UPDATE acct SET tags = '{c,d}' WHERE _id = '2';
UPDATE acct SET name = 'CAROL', town = 'Oslo' WHERE _id = '3' RETURNING *;
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.acct.acct_name
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.acct.acct_town
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.acct.acct_tags
SELECT * FROM acct WHERE town = 'Oslo' ORDER BY _id;
SELECT * FROM acct WHERE 'c' = ANY (tags) ORDER BY _id;
SELECT * FROM acct WHERE lower(name) = 'carol';
-- updating _id is refused; so is ON CONFLICT
UPDATE acct SET _id = '9' WHERE _id = '1';
INSERT INTO acct VALUES ('1', 'x') ON CONFLICT DO NOTHING;
-- a row that is gone is not updated
UPDATE acct SET n = 5 WHERE _id = '42';

-- unique violations: 23505 naming the index and the key; nothing remains
-- (not caught in a PL/pgSQL block here: MongoDB aborts a transaction on a
-- write error, and a caught error would leave it unusable)
INSERT INTO acct VALUES ('4', 'Dave', 'Rome', '{d}', 4), ('5', 'ALICE', 'Rome', '{e}', 5);
UPDATE acct SET name = 'bob' WHERE _id = '1';
INSERT INTO acct VALUES ('1', 'Eve');
-- a unique claim and a NULL key's entry in one bulk: still 23505, not a
-- transaction MongoDB aborted on the way
INSERT INTO acct VALUES ('4', 'alice', 'Rome', '{d}', 4), ('5', NULL, 'Rome', '{e}', 5);
SELECT _id, name FROM acct ORDER BY _id;
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.acct.acct_name

-- DELETE with RETURNING removes the fact and its entries
DELETE FROM acct WHERE _id = '2' RETURNING *;
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.acct.acct_tags

-- transactions: reads see the transaction's writes; ROLLBACK undoes them
BEGIN;
INSERT INTO acct VALUES ('6', 'Frank', 'Lima', '{f}', 6);
SELECT _id, name FROM acct WHERE town = 'Lima';
ROLLBACK;
SELECT count(*) FROM acct WHERE town = 'Lima';
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.acct.acct_tags
-- MongoDB has no savepoints
BEGIN;
SAVEPOINT s1;
INSERT INTO acct VALUES ('7', 'Gina', 'Lima', '{g}', 7);
ROLLBACK TO SAVEPOINT s1;
SELECT count(*) FROM acct;
ROLLBACK;
BEGIN;
INSERT INTO acct VALUES ('7', 'Gina', 'Lima', '{g}', 7);
PREPARE TRANSACTION 'p1';
SELECT count(*) FROM acct WHERE _id = '7';

-- EXPLAIN names the maintained index tables and the consistency mode
EXPLAIN (COSTS OFF) UPDATE acct SET n = 1 WHERE _id = '1';
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  UPDATE acct SET town = 'Bergen' WHERE _id = '1';

-- UPDATE and DELETE go in batches (transaction mode): the facts read by
-- $in, one bulk per index collection and one for the facts; a join that
-- gives a row twice changes and counts it once
INSERT INTO acct VALUES ('t1', 'T1', 'Tmp', '{t}', 1), ('t2', 'T2', 'Tmp', '{t}', 2);
UPDATE acct SET town = 'Tmp2' FROM (VALUES ('t1'), ('t1'), ('t2')) AS v(id) WHERE acct._id = v.id;
SELECT _id, town FROM acct WHERE town = 'Tmp2' ORDER BY _id;
SET enable_hashjoin = off;
SET enable_mergejoin = off;
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  DELETE FROM acct USING (VALUES ('t1'), ('t2'), ('t1')) AS v(id) WHERE acct._id = v.id;
RESET enable_hashjoin;
RESET enable_mergejoin;
SELECT count(*) FROM acct WHERE _id IN ('t1', 't2') OR town LIKE 'Tmp%';
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.acct.acct_tags
-- an AFTER statement trigger sees the statement's rows: no batches then
CREATE FUNCTION acct_tmp_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE NOTICE 'rows in Tmp3: %', (SELECT count(*) FROM acct WHERE town = 'Tmp3');
  RETURN NULL;
END $$;
CREATE TRIGGER acct_after_update AFTER UPDATE ON acct
  FOR EACH STATEMENT EXECUTE FUNCTION acct_tmp_count();
INSERT INTO acct VALUES ('t3', 'T3', 'Tmp', '{t}', 3);
UPDATE acct SET town = 'Tmp3' WHERE _id = 't3';
DROP TRIGGER acct_after_update ON acct;
DROP FUNCTION acct_tmp_count();
DELETE FROM acct WHERE _id = 't3';

-- EXPLAIN ANALYZE only reports: a batch is written when the subplan's rows
-- end, so the counters are final when EXPLAIN prints them, and an AFTER
-- statement trigger sees the rows; also where the target's rows come out
-- of a hash join after its scan has ended
CREATE FUNCTION acct_ex_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE NOTICE '% rows in ExA, % rows in ExB',
    (SELECT count(*) FROM acct WHERE town = 'ExA'),
    (SELECT count(*) FROM acct WHERE town = 'ExB');
  RETURN NULL;
END $$;
CREATE TRIGGER acct_ex_update AFTER UPDATE ON acct
  FOR EACH STATEMENT EXECUTE FUNCTION acct_ex_count();
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  INSERT INTO acct SELECT 'e' || g, 'ex' || g, 'ExA', '{e}', g
  FROM generate_series(1, 5) g;
SELECT count(*) FROM acct WHERE town = 'ExA';
SET enable_nestloop = off;
SET enable_mergejoin = off;
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  UPDATE acct SET town = 'ExB' FROM generate_series(1, 4) g
  WHERE acct._id = 'e' || g AND acct.town = 'ExA';
RESET enable_nestloop;
RESET enable_mergejoin;
SELECT _id, town FROM acct WHERE town IN ('ExA', 'ExB') ORDER BY _id;
DO $$
DECLARE
  n bigint;
BEGIN
  UPDATE acct SET town = 'ExA' WHERE town = 'ExB';
  GET DIAGNOSTICS n = ROW_COUNT;
  RAISE NOTICE 'updated % rows', n;
END $$;
DROP TRIGGER acct_ex_update ON acct;
DROP FUNCTION acct_ex_count();
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  DELETE FROM acct WHERE town = 'ExA';
SELECT count(*) FROM acct WHERE town = 'ExA' OR _id LIKE 'e_';

-- batched INSERT ... SELECT and COPY
ALTER FOREIGN TABLE acct OPTIONS (ADD batch_size '4');
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  INSERT INTO acct SELECT 'b' || g, 'user' || g, 'Town' || (g % 3), ARRAY['t' || (g % 2)], g
  FROM generate_series(1, 10) g;
COPY acct FROM stdin;
c1	Copy One	Oslo	{x,y}	100
c2	Copy Two	\N	\N	\N
\.
SELECT _id, name, town, tags, n FROM acct WHERE town = 'Town1' OR lower(name) LIKE 'copy%' ORDER BY _id;
SELECT count(*) FROM acct WHERE 'x' = ANY (tags);
-- (no CONTEXT: PostgreSQL 17 no longer names the line of a batch that fails)
\set SHOW_CONTEXT never
COPY acct FROM stdin;
c3	COPY ONE	Oslo	{z}	300
\.
\set SHOW_CONTEXT errors

-- ordered mode: the same results; covering reads are off
ALTER FOREIGN TABLE acct OPTIONS (ADD consistency 'ordered');
EXPLAIN (COSTS OFF) SELECT town, n FROM acct WHERE town = 'Oslo';
INSERT INTO acct VALUES ('8', 'Hugo', 'Oslo', '{h}', 8);
UPDATE acct SET town = 'Rome', n = 80 WHERE _id = '8';
SELECT show_error($$INSERT INTO acct VALUES ('9', 'Ivy', 'Oslo', '{i}', 9), ('10', 'hugo', 'Oslo', '{j}', 10)$$);
SELECT _id, name, town, n FROM acct WHERE town IN ('Oslo', 'Rome') ORDER BY _id;
DELETE FROM acct WHERE _id = '8';
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.acct.acct_name
-- a claim whose fact does not have the key is taken over once it is old
-- enough; a young one may be a write in flight
\! /usr/bin/python3 test/fixtures/documents.py claim idxtable.acct.acct_name ghost 99
INSERT INTO acct VALUES ('11', 'Ghost', 'Oslo', '{k}', 11);
\! /usr/bin/python3 test/fixtures/documents.py claim idxtable.acct.acct_name young 99 10
SELECT show_error($$INSERT INTO acct VALUES ('12', 'Young', 'Oslo', '{l}', 12)$$);
SET idxtable.unique_claim_timeout = 0;
INSERT INTO acct VALUES ('12', 'Young', 'Oslo', '{l}', 12);
RESET idxtable.unique_claim_timeout;
SELECT _id, name FROM acct WHERE lower(name) IN ('ghost', 'young') ORDER BY _id;
-- reads verify each entry against its fact: an entry left behind (here
-- "Stale" -> fact 11, whose town is Oslo) neither returns the fact nor
-- returns it twice, even when the two entries fall in different batches
\! /usr/bin/python3 test/fixtures/documents.py entry idxtable.acct.acct_town Stale 11
ALTER FOREIGN TABLE acct OPTIONS (ADD fetch_batch_size '1');
SET idxtable.enable_plain_scan = off;
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT _id FROM acct WHERE town IN ('Oslo', 'Stale') AND n = 11;
SELECT _id, town FROM acct WHERE town IN ('Oslo', 'Stale') AND n = 11;
SELECT _id, town FROM acct WHERE town = 'Stale';
RESET idxtable.enable_plain_scan;
ALTER FOREIGN TABLE acct OPTIONS (DROP fetch_batch_size);
-- a duplicate _id whose row shares an entry _id with the existing fact's
-- (same town, other included n; same NULL name): the existing fact's
-- entries are as they were after the failed statement
INSERT INTO acct VALUES ('3', NULL, 'Oslo', '{}', 33);
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.acct.acct_town
-- ROLLBACK cannot undo ordered writes, and says so
BEGIN;
INSERT INTO acct VALUES ('13', 'Jo', 'Oslo', '{m}', 13);
ROLLBACK;
SELECT _id, name FROM acct WHERE _id = '13';
-- but a statement that fails in the FDW leaves nothing of itself: what it
-- wrote so far is undone (here a multi-row UPDATE whose last row collides,
-- and an INSERT whose second batch collides)
SELECT show_error($$UPDATE acct SET name = CASE _id WHEN '13' THEN 'YOUNG' ELSE name || '!' END,
                                    town = 'Undo', tags = '{u}' WHERE _id IN ('1', '11', '13')$$);
SELECT _id, name, town, tags FROM acct WHERE _id IN ('1', '11', '13') ORDER BY _id;
ALTER FOREIGN TABLE acct OPTIONS (SET batch_size '2');
SELECT show_error($$INSERT INTO acct VALUES ('20', 'U1', 'Undo'), ('21', 'U2', 'Undo'),
                                            ('22', 'U3', 'Undo'), ('23', 'jo', 'Undo')$$);
ALTER FOREIGN TABLE acct OPTIONS (SET batch_size '4');
SELECT count(*) FROM acct WHERE town = 'Undo' OR _id IN ('20', '21', '22', '23');
-- (an error outside the FDW, in an expression of a later row, does not
-- reach it: the rows before stay deleted; uncaught, the rollback warns)
SELECT show_error($$DELETE FROM acct WHERE _id IN ('11', '12', '13') AND 1 / (n - 12) > -100$$);
SELECT _id FROM acct WHERE _id IN ('11', '12', '13') ORDER BY _id;
-- the stale entry made above is an orphan now that fact 11 is gone
SELECT name, (idxtable.verify_index(name)).* FROM idxtable.indexes WHERE "table" = 'acct'::regclass ORDER BY 1;
SELECT * FROM idxtable.repair_index('acct_town');

-- option values are checked
SELECT show_error($$ALTER FOREIGN TABLE acct OPTIONS (SET consistency 'sometimes')$$);
DROP FOREIGN TABLE acct;
