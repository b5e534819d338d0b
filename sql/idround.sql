--
-- idround: UPDATE and DELETE address a fact by its _id exactly as it was
-- read, whatever its BSON type, also where the _id column's value would
-- write another _id: a string of 24 hex digits (reads like an ObjectId), a
-- document whose keys jsonb reorders, a binary of subtype 3 (bytea writes
-- subtype 0).  Each collection also holds the look-alike the value would
-- write, which must stay untouched.
--
\! /usr/bin/python3 test/fixtures/documents.py delete idround_t '{}' > /dev/null
\! /usr/bin/python3 test/fixtures/documents.py delete idround_j '{}' > /dev/null
\! /usr/bin/python3 test/fixtures/documents.py delete idround_b '{}' > /dev/null
\! /usr/bin/python3 test/fixtures/documents.py insert idround_t '{"_id": "5f43a1b2c3d4e5f607182931", "n": 1}'
\! /usr/bin/python3 test/fixtures/documents.py insert idround_t '{"_id": {"$oid": "5f43a1b2c3d4e5f607182931"}, "n": 2}'
\! /usr/bin/python3 test/fixtures/documents.py insert idround_t '{"_id": "5f43a1b2c3d4e5f607182932", "n": 3}'
\! /usr/bin/python3 test/fixtures/documents.py insert idround_j '{"_id": {"b": 1, "a": 2}, "n": 1}'
\! /usr/bin/python3 test/fixtures/documents.py insert idround_j '{"_id": {"a": 2, "b": 1}, "n": 2}'
\! /usr/bin/python3 test/fixtures/documents.py insert idround_j '{"_id": {"z": {"y": 1, "x": 2}}, "n": 3}'
\! /usr/bin/python3 test/fixtures/documents.py insert idround_b '{"_id": {"$binary": {"base64": "AQEBAQEBAQEBAQEBAQEBAQ==", "subType": "03"}}, "n": 1}'
\! /usr/bin/python3 test/fixtures/documents.py insert idround_b '{"_id": {"$binary": {"base64": "AQEBAQEBAQEBAQEBAQEBAQ==", "subType": "00"}}, "n": 2}'
\! /usr/bin/python3 test/fixtures/documents.py insert idround_b '{"_id": {"$binary": {"base64": "AgICAgICAgICAgICAgICAg==", "subType": "03"}}, "n": 3}'
-- the row count a statement reports (its command tag)
CREATE FUNCTION idround_count(stmt text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  n bigint;
BEGIN
  EXECUTE stmt;
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END $$;
CREATE FOREIGN TABLE idround_t (_id text, n int)
  SERVER mongo OPTIONS (database 'idxtable_writes', collection 'idround_t');
CREATE FOREIGN TABLE idround_j (_id jsonb, n int)
  SERVER mongo OPTIONS (database 'idxtable_writes', collection 'idround_j');
CREATE FOREIGN TABLE idround_b (_id bytea, n int)
  SERVER mongo OPTIONS (database 'idxtable_writes', collection 'idround_b');
SELECT * FROM idround_t ORDER BY n;
SELECT * FROM idround_j ORDER BY n;
SELECT * FROM idround_b ORDER BY n;
-- bytea reads a binary of any subtype; MongoDB's equality would also compare
-- the subtype, so bytea comparisons are evaluated locally
EXPLAIN (VERBOSE, COSTS OFF) SELECT n FROM idround_b WHERE _id = '\x01010101010101010101010101010101';
SELECT n FROM idround_b WHERE _id = '\x01010101010101010101010101010101' ORDER BY n;

-- transaction mode, in batches (no RETURNING)
SELECT idround_count('UPDATE idround_t SET n = n + 10 WHERE n = 1');
SELECT idround_count('UPDATE idround_j SET n = n + 10 WHERE n = 1');
SELECT idround_count('UPDATE idround_b SET n = n + 10 WHERE n = 1');
-- row by row (RETURNING)
UPDATE idround_t SET n = n + 100 WHERE n = 3 RETURNING *;
UPDATE idround_j SET n = n + 100 WHERE n = 3 RETURNING *;
UPDATE idround_b SET n = n + 100 WHERE n = 3 RETURNING *;
\! /usr/bin/python3 test/fixtures/documents.py show idround_t
\! /usr/bin/python3 test/fixtures/documents.py show idround_j
\! /usr/bin/python3 test/fixtures/documents.py show idround_b
-- the key order of a document _id is kept (show sorts keys: count by order)
\! /usr/bin/python3 test/fixtures/documents.py count idround_j '{"_id": {"b": 1, "a": 2}, "n": 11}'

-- an index table refers to facts by their _id as stored
SELECT idxtable.create_index('idround_t', '{n}', include => '{_id}',
                             name => 'idround_t_n');
UPDATE idround_t SET n = 21 WHERE n = 11;
SELECT * FROM idround_t WHERE n = 21;
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.idround_t.idround_t_n
SELECT (idxtable.verify_index('idround_t_n')).*;
-- an UPDATE through the index (the scan fetches the facts its entries
-- name, by their _id as stored)
SET idxtable.enable_plain_scan = off;
EXPLAIN (COSTS OFF) UPDATE idround_t SET n = 31 WHERE n = 21;
UPDATE idround_t SET n = 31 WHERE n = 21;
RESET idxtable.enable_plain_scan;
SELECT * FROM idround_t ORDER BY n;

-- an UPDATE or DELETE in a WITH clause
WITH u AS (UPDATE idround_t SET n = n + 1000 WHERE n = 103 RETURNING *) SELECT * FROM u;
WITH u AS (UPDATE idround_t SET n = n - 1000 WHERE n = 1103 RETURNING *) SELECT * FROM u;

-- ordered mode: row by row, each fact its own write
ALTER FOREIGN TABLE idround_j OPTIONS (ADD consistency 'ordered');
UPDATE idround_j SET n = 1000 WHERE n = 11;
SELECT * FROM idround_j ORDER BY n;

-- DELETE, in batches and row by row
SELECT idround_count('DELETE FROM idround_t WHERE n = 31');
SELECT idround_count('DELETE FROM idround_j WHERE n = 1000');
DELETE FROM idround_b WHERE n = 11 RETURNING *;
\! /usr/bin/python3 test/fixtures/documents.py show idround_t
\! /usr/bin/python3 test/fixtures/documents.py show idround_j
\! /usr/bin/python3 test/fixtures/documents.py show idround_b
SELECT (idxtable.verify_index('idround_t_n')).*;

-- a fact deleted since the scan read it is not counted: here a row
-- trigger deletes it first (row by row, findAndModify says it matched none)
CREATE FUNCTION idround_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM idround_b WHERE n = OLD.n;
  RETURN NEW;
END $$;
CREATE TRIGGER idround_gone BEFORE UPDATE ON idround_b
  FOR EACH ROW WHEN (pg_trigger_depth() = 0) EXECUTE FUNCTION idround_gone();
SELECT idround_count('UPDATE idround_b SET n = 0 WHERE n = 103');
SELECT * FROM idround_b ORDER BY n;
DROP FUNCTION idround_gone() CASCADE;
-- in batches too: the facts MongoDB does not match are taken back from the
-- count (here a function in the WHERE clause deletes a fact, in the same
-- transaction, after the scan read it)
\! /usr/bin/python3 test/fixtures/documents.py delete idround_g '{}' > /dev/null
CREATE FOREIGN TABLE idround_g (_id int, n int)
  SERVER mongo OPTIONS (database 'idxtable_writes', collection 'idround_g');
CREATE FOREIGN TABLE idround_g2 (_id int, n int)
  SERVER mongo OPTIONS (database 'idxtable_writes', collection 'idround_g');
INSERT INTO idround_g VALUES (1, 0), (2, 0), (3, 0), (4, 0);
CREATE FUNCTION idround_zap(id int) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM idround_g2 WHERE _id = id;
  RETURN true;
END $$;
SELECT idround_count('UPDATE idround_g SET n = 1 WHERE _id <> 1 OR idround_zap(2)');
SELECT * FROM idround_g ORDER BY _id;
SELECT idround_count('DELETE FROM idround_g WHERE _id <> 1 OR idround_zap(3)');
SELECT * FROM idround_g ORDER BY _id;
-- several batches: each one's count is corrected
ALTER FOREIGN TABLE idround_g OPTIONS (ADD batch_size '2');
INSERT INTO idround_g VALUES (1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (6, 0), (7, 0);
SELECT idround_count('UPDATE idround_g SET n = 2 WHERE _id <> 1 OR (idround_zap(2) AND idround_zap(5))');
SELECT * FROM idround_g ORDER BY _id;
DROP FUNCTION idround_zap(int);
DROP FUNCTION idround_count(text);
DROP FOREIGN TABLE idround_g, idround_g2;
SELECT idxtable.drop_index('idround_t_n');
DROP FOREIGN TABLE idround_t, idround_j, idround_b;
