--
-- security_naming: index collections that cannot collide or be taken.
-- Index names contain no "." or "$", so idxtable.<collection>.<index> is
-- unambiguous; each index collection has an ownership marker in the
-- MongoDB collection idxtable.owners (cluster, database, definition).
-- "Another owner" is simulated by writing markers through a foreign table
-- mapped onto the registry.  Collections are named sn* so that no other
-- test sees them.
--
CREATE SCHEMA sn;
SET search_path = sn, public;
CREATE FOREIGN TABLE owners (_id text, fact text, "index" text, system text,
                             database_oid bigint, database text, definition text)
  SERVER mongo OPTIONS (collection 'idxtable.owners');
-- our markers: this cluster, this database, the definition's id
CREATE VIEW our_markers AS
  SELECT o._id, o.fact, o."index",
         o.system = (SELECT system_identifier::text FROM pg_control_system()) AS our_cluster,
         o.database_oid = (SELECT oid FROM pg_database WHERE datname = current_database()) AS our_db,
         o.database = current_database() AS our_dbname,
         o.definition = d.definition_id::text AS our_definition
    FROM owners o LEFT JOIN idxtable.index_defs d ON d.collection = o._id
   WHERE o._id LIKE 'idxtable.sn%';

--
-- 1. the collision: table on collection "sn.col.x" with index "y", table on
-- collection "sn.col" with index "x.y" would both be idxtable.sn.col.x.y
--
CREATE FOREIGN TABLE a (id int OPTIONS (field '_id'), x text, secret text)
  SERVER mongo OPTIONS (collection 'sn.col.x');
CREATE FOREIGN TABLE b (id int OPTIONS (field '_id'), y text)
  SERVER mongo OPTIONS (collection 'sn.col');
INSERT INTO a VALUES (1, 'k', 'secret1'), (2, NULL, 'secret2'), (3, 'k', 'secret3');
INSERT INTO b VALUES (1, 'p'), (2, 'q');
SELECT idxtable.create_index('a', '{x}', include => '{secret}', name => 'y');
SELECT show_error($$SELECT idxtable.create_index('b', '{y}', name => 'x.y')$$);
SELECT show_error($$SELECT idxtable.create_index('b', '{y}', name => 'x$y')$$);
SELECT show_error($$SELECT idxtable.create_index('b', '{y}', name => '')$$);
-- default names made of table and column names with dots use "_"
CREATE FOREIGN TABLE "sn.dotted" (id int OPTIONS (field '_id'), "c.d" text)
  SERVER mongo OPTIONS (collection 'sn.dotted');
INSERT INTO "sn.dotted" VALUES (1, 'v');
SELECT idxtable.create_index('"sn.dotted"', ARRAY['"c.d"']);
SELECT name, collection FROM idxtable.indexes WHERE collection LIKE 'idxtable.sn%' ORDER BY name;
SELECT * FROM our_markers ORDER BY _id;
-- a definition with a dotted name from before this rule (here colliding
-- with a's index) is still dropped; the collection is a's and stays, with
-- a WARNING
INSERT INTO idxtable.index_defs (name, tbl, keys, is_unique, collection, state)
  VALUES ('x.y', 'b', '{y}', false, 'idxtable.sn.col.x.y', 'valid');
\set VERBOSITY terse
SELECT idxtable.drop_index('x.y');
\set VERBOSITY default
SELECT count(*) FROM idxtable.indexes WHERE name = 'x.y';
-- a's index collection is untouched: three entries
CREATE FOREIGN TABLE y_entries (_id json, id int, v json)
  SERVER mongo OPTIONS (collection 'idxtable.sn.col.x.y');
SELECT count(*) FROM y_entries;

--
-- 2. create_index never drops a collection that is not its own
--
CREATE FOREIGN TABLE t (id int OPTIONS (field '_id'), k text) SERVER mongo
  OPTIONS (collection 'snt');
INSERT INTO t VALUES (1, 'a'), (2, 'b');
-- a collection of another owner (another cluster's database)
CREATE FOREIGN TABLE taken (_id int, v text) SERVER mongo
  OPTIONS (collection 'idxtable.snt.taken');
INSERT INTO taken VALUES (1, 'theirs'), (2, 'theirs'), (3, 'theirs');
INSERT INTO owners VALUES ('idxtable.snt.taken', 'snt', 'taken', '1234567890123456789',
                           99, 'otherdb', '11111111-2222-3333-4444-555555555555');
SELECT count(*) FROM taken;
SELECT show_error($$SELECT idxtable.create_index('t', '{k}', name => 'taken')$$);
SELECT count(*) FROM taken;
SELECT _id, database, definition FROM owners WHERE _id = 'idxtable.snt.taken';
SELECT count(*) FROM idxtable.indexes WHERE name = 'taken';
-- a collection without a marker that holds documents: refused too, and the
-- claim made for the attempt is gone again
CREATE FOREIGN TABLE unmarked (_id int, v text) SERVER mongo
  OPTIONS (collection 'idxtable.snt.unmarked');
INSERT INTO unmarked VALUES (1, 'someone''s');
SELECT show_error($$SELECT idxtable.create_index('t', '{k}', name => 'unmarked')$$);
SELECT count(*) FROM unmarked;
SELECT count(*) FROM owners WHERE _id = 'idxtable.snt.unmarked';
-- an empty one without a marker is taken
DELETE FROM unmarked;
SELECT idxtable.create_index('t', '{k}', name => 'unmarked');
SELECT entries FROM idxtable.indexes WHERE name = 'unmarked';
-- so is a marker whose collection does not exist
INSERT INTO owners VALUES ('idxtable.snt.orphan', 'snt', 'orphan', '1234567890123456789',
                           99, 'otherdb', '11111111-2222-3333-4444-555555555555');
SELECT idxtable.create_index('t', '{k}', name => 'orphan');
-- and a leftover of this database's: the table is dropped (its definitions
-- go, its collections stay), then the same index is created again
DROP FOREIGN TABLE "sn.dotted";
CREATE FOREIGN TABLE dotted2 (id int OPTIONS (field '_id'), "c.d" text)
  SERVER mongo OPTIONS (collection 'sn.dotted');
SELECT idxtable.create_index('dotted2', ARRAY['"c.d"'], name => 'sn_dotted_c_d_idx');
SELECT * FROM our_markers ORDER BY _id;
-- a failed build (here a duplicate key) drops the collection it created
-- but keeps its marker: this database's, for a definition that is gone
INSERT INTO t VALUES (3, 'a');
SELECT show_error($$SELECT idxtable.create_index('t', '{k}', is_unique => true, name => 'late')$$);
SELECT * FROM our_markers WHERE _id = 'idxtable.snt.late';
CREATE FOREIGN TABLE late (_id int, v text) SERVER mongo
  OPTIONS (collection 'idxtable.snt.late');
SELECT count(*) FROM late;
-- the server may still be executing a bulk insert of the aborted build
-- (a cancel interrupts only the wait for it), which creates the collection
-- again after the drop, without a marker of its own: simulated here
INSERT INTO late VALUES (1, 'late'), (2, 'late');
-- the next build of the name takes that leftover over, documents and all
DELETE FROM t WHERE id = 3;
SELECT idxtable.create_index('t', '{k}', is_unique => true, name => 'late');
SELECT * FROM idxtable.verify_index('late');
CREATE FOREIGN TABLE late_entries (_id json, id int) SERVER mongo
  OPTIONS (collection 'idxtable.snt.late');
SELECT _id, id FROM late_entries ORDER BY id;
SELECT * FROM our_markers WHERE _id = 'idxtable.snt.late';
SELECT idxtable.drop_index('late');
SELECT count(*) FROM late;
-- the same leftover with the marker of another cluster's database, or of
-- another database of this cluster, is refused and left as it is
INSERT INTO t VALUES (3, 'a');
SELECT show_error($$SELECT idxtable.create_index('t', '{k}', is_unique => true, name => 'late')$$);
DELETE FROM t WHERE id = 3;
INSERT INTO late VALUES (1, 'late'), (2, 'late');
UPDATE owners SET system = '1234567890123456789', database_oid = 99,
                  database = 'otherdb',
                  definition = '11111111-2222-3333-4444-555555555555'
 WHERE _id = 'idxtable.snt.late';
SELECT show_error($$SELECT idxtable.create_index('t', '{k}', is_unique => true, name => 'late')$$);
UPDATE owners SET system = (SELECT system_identifier::text FROM pg_control_system())
 WHERE _id = 'idxtable.snt.late';
-- (the DETAIL names this cluster's system identifier)
SELECT split_part(show_error($$SELECT idxtable.create_index('t', '{k}', is_unique => true, name => 'late')$$),
                  E'\n', 1);
SELECT * FROM late ORDER BY _id;
SELECT _id, database_oid, database FROM owners WHERE _id = 'idxtable.snt.late';
SELECT count(*) FROM idxtable.indexes WHERE name = 'late';
-- a marker of this database that never got as far as creating its
-- collection (a refused claim whose cleanup could not delete it) does not
-- make another's unmarked collection ours: it is refused as if unmarked
CREATE FOREIGN TABLE kept (_id int, v text) SERVER mongo
  OPTIONS (collection 'idxtable.snt.kept');
INSERT INTO kept VALUES (1, 'theirs'), (2, 'theirs');
INSERT INTO owners
  SELECT 'idxtable.snt.kept', 'snt', 'kept', system_identifier::text,
         (SELECT oid FROM pg_database WHERE datname = current_database()),
         current_database(), '22222222-3333-4444-5555-666666666666'
    FROM pg_control_system();
SELECT show_error($$SELECT idxtable.create_index('t', '{k}', name => 'kept')$$);
SELECT * FROM kept ORDER BY _id;
SELECT count(*) FROM owners WHERE _id = 'idxtable.snt.kept';
DELETE FROM kept;

--
-- 3. a scan checks the marker once per backend, when it starts (planning
-- reads none): an index whose marker names another definition (changed
-- behind its back) is unusable (a WARNING once), queries fall back to a
-- plain scan, writes that would maintain it fail, drop_index leaves the
-- collection
--
SET idxtable.enable_plain_scan = off;
EXPLAIN (COSTS OFF) SELECT secret FROM a WHERE x = 'k';
SELECT secret FROM a WHERE x = 'k' ORDER BY 1;
-- the same definition in another cluster and database (a copy restored
-- by pg_dump, or this database after pg_upgrade) may still use it
UPDATE owners SET system = '1234567890123456789', database_oid = 99,
                  database = 'otherdb'
 WHERE _id = 'idxtable.sn.col.x.y';
\c
SET search_path = sn, public;
SET idxtable.enable_plain_scan = off;
EXPLAIN (COSTS OFF) SELECT secret FROM a WHERE x = 'k';
-- and maintain it
INSERT INTO a VALUES (4, 'k', 'secret4');
SELECT count(*) FROM y_entries;
-- another definition may not
UPDATE owners SET definition = '11111111-2222-3333-4444-555555555555'
 WHERE _id = 'idxtable.sn.col.x.y';
-- this backend has checked it already
EXPLAIN (COSTS OFF) SELECT secret FROM a WHERE x = 'k';
\c
SET search_path = sn, public;
SET idxtable.enable_plain_scan = off;
-- the plan names the index, whose marker nobody has read yet; the scan
-- reads it, and the facts instead of the entries; later plans leave the
-- index out
EXPLAIN (COSTS OFF) SELECT secret FROM a WHERE x = 'k';
SELECT secret FROM a WHERE x = 'k' ORDER BY 1;
EXPLAIN (COSTS OFF) SELECT secret FROM a WHERE x = 'k';
SELECT show_error($$INSERT INTO a VALUES (5, 'k', 'mine')$$);
SELECT show_error($$UPDATE a SET x = 'z' WHERE id = 1$$);
SELECT show_error($$SELECT * FROM idxtable.verify_index('y')$$);
SELECT count(*) FROM a;
-- a missing marker is the same
SELECT idxtable.create_index('t', '{k}', name => 'nomarker');
DELETE FROM owners WHERE _id = 'idxtable.snt.nomarker';
\c
SET search_path = sn, public;
SET idxtable.enable_plain_scan = off;
SELECT k FROM t WHERE k = 'a';
EXPLAIN (COSTS OFF) SELECT k FROM t WHERE k = 'a';
-- drop_index drops the definitions, and leaves the collections that are
-- not theirs
SELECT idxtable.drop_index('y');
SELECT idxtable.drop_index('nomarker');
SELECT count(*) FROM y_entries;
SELECT _id, database FROM owners WHERE _id = 'idxtable.sn.col.x.y';
CREATE FOREIGN TABLE nomarker_entries (_id json, id int) SERVER mongo
  OPTIONS (collection 'idxtable.snt.nomarker');
SELECT count(*) FROM nomarker_entries;
-- nor does a copy of the definition drop the collection of the original
SELECT idxtable.create_index('t', '{k}', name => 'copy');
UPDATE owners SET system = '1234567890123456789', database_oid = 99,
                  database = 'otherdb'
 WHERE _id = 'idxtable.snt.copy';
\set VERBOSITY terse
SELECT idxtable.drop_index('copy');
\set VERBOSITY default
CREATE FOREIGN TABLE copy_entries (_id json, id int) SERVER mongo
  OPTIONS (collection 'idxtable.snt.copy');
SELECT count(*) FROM copy_entries;

--
-- 4. markers are not in the index collections: IS NULL lookups (which
-- match documents without the key field), covering reads, verify_index
-- and ANALYZE's entry count see the entries only
--
CREATE FOREIGN TABLE n (id int OPTIONS (field '_id'), k int, w text) SERVER mongo
  OPTIONS (collection 'snn');
INSERT INTO n SELECT i, CASE WHEN i % 3 = 0 THEN NULL ELSE i % 5 END, 'w' || i
  FROM generate_series(1, 30) i;
SELECT idxtable.create_index('n', '{k}', include => '{w}', name => 'n_k');
CREATE FOREIGN TABLE n_entries (_id json, id int, v json) SERVER mongo
  OPTIONS (collection 'idxtable.snn.n_k');
SELECT count(*) FROM n_entries;
EXPLAIN (COSTS OFF) SELECT id FROM n WHERE k IS NULL;
SELECT count(*), sum(id) FROM n WHERE k IS NULL;
EXPLAIN (COSTS OFF) SELECT k, w FROM n WHERE k IS NULL;
SELECT count(*), min(w), max(w) FROM (SELECT k, w FROM n WHERE k IS NULL) s;
SELECT * FROM idxtable.verify_index('n_k');
ANALYZE n;
SELECT entries FROM idxtable.indexes WHERE name = 'n_k';
SELECT count(*) FROM owners WHERE _id = 'idxtable.snn.n_k';

--
-- clean up: dropping our indexes drops their collections and markers
--
RESET idxtable.enable_plain_scan;
SELECT idxtable.drop_index(name) FROM idxtable.indexes
 WHERE collection LIKE 'idxtable.sn%' ORDER BY name;
SELECT count(*) FROM n_entries;
SELECT _id FROM owners WHERE _id LIKE 'idxtable.sn%' ORDER BY _id;
DELETE FROM owners WHERE _id LIKE 'idxtable.sn%';
DELETE FROM y_entries;
DELETE FROM nomarker_entries;
DELETE FROM copy_entries;
DELETE FROM late;
DELETE FROM taken;
DELETE FROM a;
DELETE FROM b;
DELETE FROM t;
DELETE FROM n;
DELETE FROM dotted2;
DROP SCHEMA sn CASCADE;
