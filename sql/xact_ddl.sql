--
-- xact_ddl: create_index and drop_index in transactions that write to
-- foreign tables.  The MongoDB commit comes first, then the collection
-- drops; the MongoDB abort first, then the drops of aborted builds; a
-- build refuses to run beside an open MongoDB transaction; an ordered
-- write after a drop_index of the table's index is refused.  Either way
-- idxtable.indexes and the collections in MongoDB agree, and routed and
-- plain scans return the same rows.
--
\! /usr/bin/python3 test/fixtures/index_collections.py idxtable_xact drop
CREATE FOREIGN TABLE xd (_id text, town text, n int)
  SERVER mongo OPTIONS (database 'idxtable_xact', collection 'xd');
CREATE FOREIGN TABLE xo (_id text, town text, n int)
  SERVER mongo OPTIONS (database 'idxtable_xact', collection 'xo',
                        consistency 'ordered');
-- what a table holds for a town, through its index and through a plain
-- scan, and what its indexes say about themselves
CREATE FUNCTION xd_check(tbl regclass, t text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  routed bigint;
  plain bigint;
  report text;
BEGIN
  PERFORM set_config('idxtable.enable_plain_scan', 'off', false);
  EXECUTE format('SELECT count(*) FROM %s WHERE town = $1', tbl) INTO routed USING t;
  PERFORM set_config('idxtable.enable_plain_scan', 'on', false);
  PERFORM set_config('idxtable.enable_index_routing', 'off', false);
  EXECUTE format('SELECT count(*) FROM %s WHERE town = $1', tbl) INTO plain USING t;
  PERFORM set_config('idxtable.enable_index_routing', 'on', false);
  SELECT string_agg(format('%s %s: %s checked, %s missing, %s orphan', i.name, i.state,
                           v.checked, v.missing, v.orphan), '; ' ORDER BY i.name)
    INTO report
    FROM idxtable.indexes i, idxtable.verify_index(i.name) v
   WHERE i."table" = tbl;
  RETURN format('%s routed, %s plain; %s', routed, plain, coalesce(report, 'no index'));
END $$;
INSERT INTO xd VALUES ('1', 'Oslo', 1), ('2', 'Rome', 2);
INSERT INTO xo VALUES ('1', 'Oslo', 1), ('2', 'Rome', 2);
SELECT idxtable.create_index('xd', '{town}', name => 'xd_town');
SELECT idxtable.create_index('xo', '{town}', name => 'xo_town');
SELECT xd_check('xd', 'Oslo');

--
-- drop_index after a write: the MongoDB commit comes first, then the drop
--
BEGIN;
INSERT INTO xd VALUES ('3', 'Oslo', 3);
SELECT idxtable.drop_index('xd_town');
COMMIT;
SELECT name FROM idxtable.indexes WHERE "table" = 'xd'::regclass;
\! /usr/bin/python3 test/fixtures/index_collections.py idxtable_xact
SELECT xd_check('xd', 'Oslo');

--
-- create_index after a write: refused (the build would miss the write)
--
BEGIN;
INSERT INTO xd VALUES ('4', 'Oslo', 4);
SELECT show_error($$SELECT idxtable.create_index('xd', '{n}', name => 'xd_n')$$);
ROLLBACK;
BEGIN;
INSERT INTO xd VALUES ('4', 'Oslo', 4);
SELECT idxtable.create_index('xd', '{n}', name => 'xd_n');
INSERT INTO xd VALUES ('5', 'Oslo', 5);
COMMIT;
SELECT count(*) FROM xd WHERE n IN (4, 5);
SELECT name FROM idxtable.indexes WHERE "table" = 'xd'::regclass;
\! /usr/bin/python3 test/fixtures/index_collections.py idxtable_xact

--
-- create_index, then writes: they join the MongoDB transaction; at
-- ROLLBACK it is aborted before the new collection is dropped
--
BEGIN;
SELECT idxtable.create_index('xd', '{town}', name => 'xd_town');
INSERT INTO xd VALUES ('4', 'Oslo', 4);
ROLLBACK;
SELECT name FROM idxtable.indexes WHERE "table" = 'xd'::regclass;
\! /usr/bin/python3 test/fixtures/index_collections.py idxtable_xact
SELECT xd_check('xd', 'Oslo');
BEGIN;
SELECT idxtable.create_index('xd', '{town}', name => 'xd_town');
INSERT INTO xd VALUES ('4', 'Oslo', 4);
UPDATE xd SET town = 'Oslo' WHERE _id = '2';
COMMIT;
SELECT xd_check('xd', 'Oslo');
\! /usr/bin/python3 test/fixtures/index_collections.py idxtable_xact

--
-- drop_index, then writes: committed, the index is gone; rolled back,
-- the index is back with none of the writes
--
BEGIN;
SELECT idxtable.drop_index('xd_town');
INSERT INTO xd VALUES ('5', 'Oslo', 5);
ROLLBACK;
SELECT xd_check('xd', 'Oslo');
BEGIN;
SELECT idxtable.drop_index('xd_town');
INSERT INTO xd VALUES ('5', 'Oslo', 5);
COMMIT;
SELECT xd_check('xd', 'Oslo');
\! /usr/bin/python3 test/fixtures/index_collections.py idxtable_xact

--
-- savepoints
--
SELECT idxtable.create_index('xd', '{town}', name => 'xd_town');
-- a build and a write rolled back to a savepoint: the MongoDB transaction
-- is aborted before the build's collection is dropped
BEGIN;
SAVEPOINT s;
SELECT idxtable.create_index('xd', '{n}', name => 'xd_n');
INSERT INTO xd VALUES ('6', 'Oslo', 6);
ROLLBACK TO s;
SELECT name FROM idxtable.indexes WHERE "table" = 'xd'::regclass;
ROLLBACK;
\! /usr/bin/python3 test/fixtures/index_collections.py idxtable_xact
-- a drop rolled back to a savepoint taken after a write: the index stays,
-- and the writes before and after it are in it
BEGIN;
INSERT INTO xd VALUES ('6', 'Oslo', 6);
SAVEPOINT s;
SELECT idxtable.drop_index('xd_town');
ROLLBACK TO s;
INSERT INTO xd VALUES ('7', 'Oslo', 7);
COMMIT;
SELECT xd_check('xd', 'Oslo');
-- a build refused in a subtransaction after a write: the savepoint keeps
-- the transaction, and its writes commit
BEGIN;
INSERT INTO xd VALUES ('8', 'Oslo', 8);
SAVEPOINT s;
SELECT show_error($$SELECT idxtable.create_index('xd', '{n}', name => 'xd_n')$$);
ROLLBACK TO s;
COMMIT;
SELECT xd_check('xd', 'Oslo');
-- a write and a drop in a released savepoint: committed together
BEGIN;
SAVEPOINT s;
INSERT INTO xd VALUES ('9', 'Oslo', 9);
SELECT idxtable.drop_index('xd_town');
RELEASE s;
COMMIT;
SELECT xd_check('xd', 'Oslo');
\! /usr/bin/python3 test/fixtures/index_collections.py idxtable_xact

--
-- consistency 'ordered': writes are final at once, so a build after them
-- sees them; a write after a drop_index of the table's index is refused
--
BEGIN;
INSERT INTO xo VALUES ('3', 'Oslo', 3);
SELECT idxtable.create_index('xo', '{n}', name => 'xo_n');
INSERT INTO xo VALUES ('4', 'Oslo', 4);
COMMIT;
SELECT xd_check('xo', 'Oslo');
SELECT count(*) FROM xo WHERE n = 3;
BEGIN;
SELECT idxtable.drop_index('xo_town');
SELECT show_error($$INSERT INTO xo VALUES ('5', 'Oslo', 5)$$);
ROLLBACK;
SELECT xd_check('xo', 'Oslo');
BEGIN;
INSERT INTO xo VALUES ('5', 'Oslo', 5);
SELECT idxtable.drop_index('xo_n');
COMMIT;
SELECT name FROM idxtable.indexes WHERE "table" = 'xo'::regclass;
\! /usr/bin/python3 test/fixtures/index_collections.py idxtable_xact
SELECT xd_check('xo', 'Oslo');

--
-- the MongoDB commit fails: the COMMIT fails, the drop never runs, and the
-- definition and its collection are both still there
--
SELECT idxtable.create_index('xd', '{town}', name => 'xd_town');
BEGIN;
INSERT INTO xd VALUES ('10', 'Oslo', 10);
SELECT idxtable.drop_index('xd_town');
\! /usr/bin/python3 test/fixtures/failpoint.py commitTransaction 2 --times 1
COMMIT;
SELECT name, state FROM idxtable.indexes WHERE "table" = 'xd'::regclass;
\! /usr/bin/python3 test/fixtures/index_collections.py idxtable_xact
SELECT xd_check('xd', 'Oslo');

--
-- the drop fails after the MongoDB commit: a WARNING, the definition is
-- gone, and the collection left behind is taken over by the next
-- create_index of the name
--
BEGIN;
INSERT INTO xd VALUES ('10', 'Oslo', 10);
SELECT idxtable.drop_index('xd_town');
\! /usr/bin/python3 test/fixtures/failpoint.py drop 2 --times 1
COMMIT;
SELECT name FROM idxtable.indexes WHERE "table" = 'xd'::regclass;
\! /usr/bin/python3 test/fixtures/index_collections.py idxtable_xact
SELECT xd_check('xd', 'Oslo');
SELECT idxtable.create_index('xd', '{town}', name => 'xd_town');
SELECT xd_check('xd', 'Oslo');
\! /usr/bin/python3 test/fixtures/index_collections.py idxtable_xact

--
-- a failed ordered-mode statement whose undo fails too (the undo runs in
-- a subtransaction of its own): the statement's own error is the one
-- reported, the WARNING says what remains, indexes and facts agree, and
-- the session goes on (a statement timeout still interrupts it)
--
CREATE FOREIGN TABLE xu (_id text, town text, n int)
  SERVER mongo OPTIONS (database 'idxtable_xact', collection 'xu',
                        consistency 'ordered', batch_size '2');
INSERT INTO xu VALUES ('1', 'Oslo', 1);
SELECT idxtable.create_index('xu', '{n}', is_unique => true, name => 'xu_n');
\! /usr/bin/python3 test/fixtures/failpoint.py findAndModify 2 --times 1
SELECT show_error($$INSERT INTO xu VALUES ('20', 'Undo', 20), ('21', 'Undo', 21),
                                          ('22', 'Undo', 22), ('23', 'Undo', 1)$$);
\! /usr/bin/python3 test/fixtures/failpoint.py off
SELECT _id, town, n FROM xu ORDER BY _id;
SELECT * FROM idxtable.verify_index('xu_n');
SET statement_timeout = '200ms';
SELECT pg_sleep(2);
RESET statement_timeout;
-- and an undo that works leaves nothing
SELECT show_error($$INSERT INTO xu VALUES ('24', 'Undo', 24), ('25', 'Undo', 25),
                                          ('26', 'Undo', 26), ('27', 'Undo', 1)$$);
SELECT _id, town, n FROM xu ORDER BY _id;

DROP FUNCTION xd_check(regclass, text);
DROP FOREIGN TABLE xd, xo, xu;
\! /usr/bin/python3 test/fixtures/index_collections.py idxtable_xact drop
