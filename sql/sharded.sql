--
-- sharded: a collection flagged as sharded on {region: 1, n: 1} (the test
-- server refuses, as mongos 6.0 does, a findAndModify without the whole
-- shard key and a single-document update or delete with neither it nor an
-- _id equality).  The table option shard_key puts the shard key values of
-- the row as it was read into every filter that addresses one fact.
--
\! /usr/bin/python3 test/fixtures/documents.py shard shorders '{"region": 1, "n": 1}'
CREATE FOREIGN TABLE shorders (_id int, region text, n int, v text)
  SERVER mongo OPTIONS (database 'idxtable_writes', collection 'shorders');
SELECT idxtable.create_index('shorders', '{v}', is_unique => true, name => 'shorders_v');
INSERT INTO shorders VALUES (1, 'eu', 1, 'a'), (2, 'us', 2, 'b'), (3, 'eu', 3, 'c'),
                            (4, 'us', 4, 'd');

-- without shard_key: transaction mode's batches address facts by an _id
-- equality (updateOne) or as a multi-document delete, which mongos routes
UPDATE shorders SET v = 'a1' WHERE _id = 1;
DELETE FROM shorders WHERE _id = 4;
-- but a findAndModify (RETURNING, row triggers, ordered mode, the undo) is
-- refused, and the error says what to do
UPDATE shorders SET v = 'x' WHERE _id = 1 RETURNING *;
DELETE FROM shorders WHERE _id = 2 RETURNING *;
CREATE FUNCTION shorders_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE NOTICE '% of %', TG_OP, OLD;
  RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
END $$;
CREATE TRIGGER shorders_row BEFORE UPDATE OR DELETE ON shorders
  FOR EACH ROW EXECUTE FUNCTION shorders_row();
UPDATE shorders SET v = 'x' WHERE _id = 1;
DROP TRIGGER shorders_row ON shorders;
ALTER FOREIGN TABLE shorders OPTIONS (ADD consistency 'ordered', ADD batch_size '1');
UPDATE shorders SET v = 'x' WHERE _id = 1;
DELETE FROM shorders WHERE _id = 2;
-- an INSERT whose second row collides (unique index shorders_v): the undo
-- of its first row is refused too, so that row stays, with a WARNING
SELECT show_error($$INSERT INTO shorders VALUES (5, 'eu', 5, 'e'), (6, 'us', 6, 'a1')$$);
\! /usr/bin/python3 test/fixtures/documents.py show shorders
DELETE FROM shorders WHERE _id = 5;

-- a shard key column that is not a column, or named twice, or an empty list
ALTER FOREIGN TABLE shorders OPTIONS (ADD shard_key 'region, region');
ALTER FOREIGN TABLE shorders OPTIONS (ADD shard_key '');
ALTER FOREIGN TABLE shorders OPTIONS (ADD shard_key 'region, "N"');
SELECT count(*) FROM shorders;
ALTER FOREIGN TABLE shorders ADD COLUMN region2 text OPTIONS (field 'region');
ALTER FOREIGN TABLE shorders OPTIONS (SET shard_key 'region, region2');
SELECT count(*) FROM shorders;
ALTER FOREIGN TABLE shorders DROP COLUMN region2;
-- a shard key without all the collection's fields is refused by mongos
ALTER FOREIGN TABLE shorders OPTIONS (SET shard_key 'region');
UPDATE shorders SET v = 'x' WHERE _id = 1;
-- the whole shard key; it shows in pg_dump's form of the options
ALTER FOREIGN TABLE shorders OPTIONS (SET shard_key 'region, n');
SELECT ftoptions FROM pg_foreign_table WHERE ftrelid = 'shorders'::regclass;

-- ordered mode: UPDATE, DELETE, RETURNING, a row trigger
UPDATE shorders SET v = 'x' WHERE _id = 1 RETURNING *;
CREATE TRIGGER shorders_row BEFORE UPDATE OR DELETE ON shorders
  FOR EACH ROW EXECUTE FUNCTION shorders_row();
UPDATE shorders SET v = v || '!' WHERE region = 'eu';
DELETE FROM shorders WHERE _id = 3;
DROP TRIGGER shorders_row ON shorders;
INSERT INTO shorders VALUES (7, 'eu', 7, 'g'), (8, 'us', 8, 'h') RETURNING *;
DELETE FROM shorders WHERE _id = 8 RETURNING *;
-- a statement that fails is undone: the UPDATE of two rows whose second
-- collides, the INSERT whose second row collides
UPDATE shorders SET v = CASE _id WHEN 1 THEN 'y' ELSE 'e!' END WHERE _id IN (1, 7);
INSERT INTO shorders VALUES (9, 'eu', 9, 'i'), (10, 'us', 10, 'b');
SELECT _id, region, n, v FROM shorders ORDER BY _id;
\! /usr/bin/python3 test/fixtures/documents.py show shorders
SELECT (idxtable.verify_index('shorders_v')).*;

-- transaction mode: the same, and the batches
ALTER FOREIGN TABLE shorders OPTIONS (DROP consistency, SET batch_size '3');
UPDATE shorders SET v = 'z' WHERE _id = 1 RETURNING *;
DELETE FROM shorders WHERE _id = 7 RETURNING *;
INSERT INTO shorders SELECT g, CASE WHEN g % 2 = 0 THEN 'us' ELSE 'eu' END, g, 'v' || g
  FROM generate_series(11, 18) g;
UPDATE shorders SET v = v || '+' WHERE _id > 10;
DELETE FROM shorders WHERE _id IN (11, 12, 13, 14);
CREATE TRIGGER shorders_row BEFORE UPDATE OR DELETE ON shorders
  FOR EACH ROW EXECUTE FUNCTION shorders_row();
UPDATE shorders SET v = 'w' WHERE _id = 15;
DELETE FROM shorders WHERE _id = 16;
DROP TRIGGER shorders_row ON shorders;
-- a shard key value can change in transaction mode, where mongos moves
-- the document to its new shard (the filter holds the old values): by
-- findAndModify and by a batch; ordered mode refuses it
UPDATE shorders SET region = 'ap' WHERE _id = 1 RETURNING *;
UPDATE shorders SET n = n + 100, v = v || '>' WHERE _id IN (17, 18);
ALTER FOREIGN TABLE shorders OPTIONS (ADD consistency 'ordered');
UPDATE shorders SET region = 'eu' WHERE _id = 1;
ALTER FOREIGN TABLE shorders OPTIONS (DROP consistency);
SELECT _id, region, n, v FROM shorders ORDER BY _id;
\! /usr/bin/python3 test/fixtures/documents.py show shorders
SELECT (idxtable.verify_index('shorders_v')).*;

-- a batch whose second fact has a duplicate _id (ordered mode): the first
-- row's fact is removed again, by its _id and shard key values
ALTER FOREIGN TABLE shorders OPTIONS (ADD consistency 'ordered', SET batch_size '2');
SELECT show_error($$INSERT INTO shorders VALUES (20, 'eu', 20, 't'), (1, 'us', 1001, 'dup')$$);
SELECT _id, region, n, v FROM shorders WHERE _id IN (1, 20);
ALTER FOREIGN TABLE shorders OPTIONS (DROP consistency);

-- _id is unique per shard only, unless it is the shard key: a unique
-- index table on _id makes a duplicate _id a unique violation.  Ordered
-- mode writes the entries first, so its claim fails before any fact is
-- written; transaction mode writes the facts first, so a duplicate on the
-- same shard fails there ("_id_"), one on another shard at the claim, and
-- the transaction keeps neither
SELECT idxtable.create_index('shorders', '{_id}', is_unique => true, name => 'shorders_id');
INSERT INTO shorders VALUES (1, 'us', 1001, 'dup');
ALTER FOREIGN TABLE shorders OPTIONS (ADD consistency 'ordered');
INSERT INTO shorders VALUES (1, 'us', 1001, 'dup');
SELECT _id, region, n, v FROM shorders WHERE _id = 1;
SELECT (idxtable.verify_index('shorders_id')).*;

SELECT idxtable.drop_index('shorders_id');
SELECT idxtable.drop_index('shorders_v');
DROP FOREIGN TABLE shorders;
DROP FUNCTION shorders_row();
