--
-- indexes: index tables — definitions, entries, builds, drops, dumps
--
-- Tables of their own (schema ix), so that the indexes made here change no
-- other test's plans.  The entries are looked at through foreign tables
-- mapped onto the index collections, whose _id is shown as json (which
-- keeps the field order).
--
SET timezone = 'UTC';
CREATE SCHEMA ix;
SET search_path = ix, public;
CREATE FOREIGN TABLE people (
  id int OPTIONS (field '_id'), name text, town text, age int,
  active boolean, score float8, joined timestamp, uid uuid,
  zip text OPTIONS (field 'address.zip')
) SERVER mongo OPTIONS (collection 'people');
CREATE FOREIGN TABLE movies (id int OPTIONS (field '_id'), title text, year int, actors text[])
  SERVER mongo OPTIONS (collection 'movies');
CREATE FOREIGN TABLE accounts (id int OPTIONS (field '_id'), name varchar(20), email text, plan text)
  SERVER mongo OPTIONS (collection 'accounts');
CREATE FOREIGN TABLE objids (id text OPTIONS (field '_id'), k int)
  SERVER mongo OPTIONS (collection 'objids');
CREATE FOREIGN TABLE types (
  id int OPTIONS (field '_id'), t text, i2 smallint, i4 integer, i8 bigint,
  n numeric, f8 float8, b boolean, ts timestamp, tstz timestamptz, d date,
  u uuid, by bytea, j jsonb, arr_i int[], arr_t text[]
) SERVER mongo OPTIONS (collection 'types');
-- nothing yet
SELECT * FROM idxtable.indexes;
\! /usr/bin/python3 test/fixtures/index_collections.py

--
-- a plain index: one entry per fact, NULL keys included
--
SELECT idxtable.create_index('people', '{town}');
CREATE FOREIGN TABLE people_town_entries (_id json, id int, v json)
  SERVER mongo OPTIONS (collection 'idxtable.people.people_town_idx');
SELECT * FROM people_town_entries ORDER BY id;

--
-- composite, lower(), INCLUDE (covering): entries carry the included
-- columns in "v"; integers of any BSON type become int64
--
SELECT idxtable.create_index('people', '{"lower( town )", age}', include => '{name, "Joined"}');
SELECT idxtable.create_index('people', '{lower(town), age}', '{name, joined}');
CREATE FOREIGN TABLE people_lower_entries (_id json, id int, v json)
  SERVER mongo OPTIONS (collection 'idxtable.people.people_town_age_idx');
SELECT * FROM people_lower_entries ORDER BY id LIMIT 8;
-- keys as normalized, the default name made unique
SELECT idxtable.create_index('people', '{TOWN}');

--
-- key types: canonical BSON per type (smallint as int64, dates in
-- milliseconds, uuid as binary subtype 4)
--
SELECT idxtable.create_index('types', '{i2, i8, b, ts, d, u}', name => 'types_keys');
SELECT idxtable.create_index('types', '{upper(t), tstz}', name => 'types_upper');
CREATE FOREIGN TABLE types_keys_entries (_id json, id int)
  SERVER mongo OPTIONS (collection 'idxtable.types.types_keys');
SELECT * FROM types_keys_entries ORDER BY id;
CREATE FOREIGN TABLE types_upper_entries (_id json, id int)
  SERVER mongo OPTIONS (collection 'idxtable.types.types_upper');
SELECT * FROM types_upper_entries ORDER BY id;
-- fact _ids are kept as they are (ObjectIds here)
SELECT idxtable.create_index('objids', '{k}');
CREATE FOREIGN TABLE objids_entries (_id json, id text)
  SERVER mongo OPTIONS (collection 'idxtable.objids.objids_k_idx');
SELECT * FROM objids_entries ORDER BY id;

--
-- multi-valued keys (array columns): one entry per distinct non-null
-- element; NULL, empty and missing arrays have no entries
--
SELECT id, actors FROM movies ORDER BY id;
SELECT idxtable.create_index('movies', '{actors}');
CREATE FOREIGN TABLE movies_actors_entries (_id json, id int)
  SERVER mongo OPTIONS (collection 'idxtable.movies.movies_actors_idx');
SELECT * FROM movies_actors_entries ORDER BY id, _id::text;
-- with another key component
SELECT idxtable.create_index('movies', '{year, actors}', '{title}');
CREATE FOREIGN TABLE movies_year_entries (_id json, id int, v json)
  SERVER mongo OPTIONS (collection 'idxtable.movies.movies_year_actors_idx');
SELECT * FROM movies_year_entries ORDER BY id, _id::text;

--
-- unique indexes: _id without the fact id unless a key is NULL (NULLs are
-- distinct); a duplicate fails the build
--
SELECT id, name FROM accounts ORDER BY id;
SELECT idxtable.create_index('accounts', '{name}', is_unique => true);
CREATE FOREIGN TABLE accounts_name_entries (_id json, id int)
  SERVER mongo OPTIONS (collection 'idxtable.accounts.accounts_name_idx');
SELECT * FROM accounts_name_entries ORDER BY id;
SELECT show_error($$SELECT idxtable.create_index('accounts', '{lower(name)}', is_unique => true, name => 'accounts_lower_key')$$);
-- nothing of the failed build is left: no definition, no collection
SELECT count(*) FROM idxtable.indexes WHERE name = 'accounts_lower_key';
\! /usr/bin/python3 test/fixtures/index_collections.py
-- the same without a subtransaction around it
SELECT idxtable.create_index('accounts', '{lower(name)}', is_unique => true, name => 'accounts_lower_key');
-- another try under another name (not unique) works
SELECT idxtable.create_index('accounts', '{lower(name)}', name => 'accounts_lower');
-- a composite unique key, lower(email) unique per plan
SELECT idxtable.create_index('accounts', '{plan, lower(email)}', is_unique => true);
CREATE FOREIGN TABLE accounts_plan_entries (_id json, id int)
  SERVER mongo OPTIONS (collection 'idxtable.accounts.accounts_plan_email_idx');
SELECT * FROM accounts_plan_entries ORDER BY id;
-- unique multi-valued: no element in two facts
SELECT show_error($$SELECT idxtable.create_index('movies', '{actors}', is_unique => true, name => 'movies_actor_key')$$);
SELECT idxtable.create_index('movies', '{actors, year}', is_unique => true, name => 'movies_actor_year_key');

--
-- definition errors
--
CREATE TABLE local_t (a int);
CREATE FOREIGN DATA WRAPPER other_fdw;
CREATE SERVER other_srv FOREIGN DATA WRAPPER other_fdw;
CREATE FOREIGN TABLE other_t (a int) SERVER other_srv;
SELECT show_error(s) FROM (VALUES
  ($$SELECT idxtable.create_index('local_t', '{a}')$$),
  ($$SELECT idxtable.create_index('other_t', '{a}')$$),
  ($$SELECT idxtable.create_index('people', '{nosuch}')$$),
  ($$SELECT idxtable.create_index('people', ARRAY['"Town"'])$$),
  ($$SELECT idxtable.create_index('people', '{score}')$$),
  ($$SELECT idxtable.create_index('types', '{n}')$$),
  ($$SELECT idxtable.create_index('types', '{j}')$$),
  ($$SELECT idxtable.create_index('types', '{by}')$$),
  ($$SELECT idxtable.create_index('people', '{lower(age)}')$$),
  ($$SELECT idxtable.create_index('movies', '{lower(actors)}')$$),
  ($$SELECT idxtable.create_index('people', '{length(town)}')$$),
  ($$SELECT idxtable.create_index('people', '{lower(town}')$$),
  ($$SELECT idxtable.create_index('people', '{town name}')$$),
  ($$SELECT idxtable.create_index('people', '{""}')$$),
  ($$SELECT idxtable.create_index('people', '{town, town}')$$),
  ($$SELECT idxtable.create_index('types', '{arr_i, arr_t}')$$),
  ($$SELECT idxtable.create_index('people', '{}')$$),
  ($$SELECT idxtable.create_index('people', NULL)$$),
  ($$SELECT idxtable.create_index(NULL, '{town}')$$),
  ($$SELECT idxtable.create_index('people', '{town, NULL}')$$),
  ($$SELECT idxtable.create_index('people', '{town}', '{town}')$$),
  ($$SELECT idxtable.create_index('people', '{town}', '{nosuch}')$$),
  ($$SELECT idxtable.create_index('people', '{town}', '{name, name}')$$),
  ($$SELECT idxtable.create_index('people', '{town}', '{lower(name)}')$$),
  ($$SELECT idxtable.create_index('people', '{town}', name => 'people_town_idx')$$),
  ($$SELECT idxtable.create_index('people', '{town}', name => 'a$b')$$),
  ($$SELECT idxtable.create_index('people', '{town}', name => '')$$),
  ($$SELECT idxtable.create_index('people', '{town}', name => repeat('x', 190))$$),
  ($$SELECT idxtable.create_index('people', '{town}', name => 'people_sh', sharding => 'striped')$$),
  ($$SELECT idxtable.create_index('people', '{town}', name => 'people_sh', sharding => 'ranged')$$),
  ($$SELECT idxtable.drop_index('nosuch')$$)) AS t(s);
-- the hints
SELECT idxtable.create_index('types', '{n}');
SELECT idxtable.create_index('people', '{upper(active)}');
SELECT idxtable.create_index('people', '{town-1}');
-- only the owner of the foreign table creates and drops its indexes
CREATE ROLE regress_ix_other;
GRANT USAGE ON SCHEMA ix TO regress_ix_other;
SET ROLE regress_ix_other;
SELECT show_error($$SELECT idxtable.create_index('people', '{name}')$$);
SELECT show_error($$SELECT idxtable.drop_index('people_town_idx')$$);
SELECT name FROM idxtable.indexes WHERE name = 'people_town_idx';
RESET ROLE;
DROP FOREIGN TABLE other_t;
DROP SERVER other_srv;
DROP FOREIGN DATA WRAPPER other_fdw;
DROP TABLE local_t;

--
-- the definitions
--
SELECT * FROM idxtable.indexes ORDER BY name;
SELECT name, entries, distinct_keys FROM idxtable.index_defs ORDER BY name;

--
-- failures during a build, cancellation: the collection goes with the
-- transaction
--
\! /usr/bin/python3 test/fixtures/failpoint.py insert 2 --times 1
SELECT show_error($$SELECT idxtable.create_index('people', '{name}', name => 'people_fail')$$);
-- (the timeout interrupts the wait at once; the server goes on with the
-- blocked command, here a read)
\! /usr/bin/python3 test/fixtures/failpoint.py find --block 1500 --times 1
SET statement_timeout = '300ms';
SELECT idxtable.create_index('people', '{name}', name => 'people_cancel');
RESET statement_timeout;
-- a blocked bulk insert of entries goes on too, and creates the collection
-- again after the cleanup dropped it: the cleanup keeps the ownership
-- marker, so a new build of the same name takes that leftover over
\! /usr/bin/python3 test/fixtures/failpoint.py insert --block 2000 --times 1
SET statement_timeout = '1200ms';
SELECT idxtable.create_index('people', '{name}', name => 'people_late');
RESET statement_timeout;
SELECT pg_sleep(2.5);
\! /usr/bin/python3 test/fixtures/index_collections.py | grep people_late
SELECT idxtable.create_index('people', '{name}', name => 'people_late');
SELECT * FROM idxtable.verify_index('people_late');
SELECT idxtable.drop_index('people_late');
BEGIN;
SELECT idxtable.create_index('people', '{name}', name => 'people_rollback');
SELECT count(*) FROM idxtable.indexes WHERE name = 'people_rollback';
ROLLBACK;
SELECT count(*) FROM idxtable.indexes WHERE name LIKE 'people\_%' AND name NOT LIKE '%idx%';
\! /usr/bin/python3 test/fixtures/index_collections.py
-- if the cleanup itself fails, a WARNING says so; a new build of the same
-- name drops the leftover collection first
\! /usr/bin/python3 test/fixtures/failpoint.py insert,drop 2 --times 2
SELECT show_error($$SELECT idxtable.create_index('people', '{name}', name => 'people_leftover')$$);
\! /usr/bin/python3 test/fixtures/failpoint.py off
\! /usr/bin/python3 test/fixtures/index_collections.py | grep leftover
SELECT idxtable.create_index('people', '{name}', name => 'people_leftover');
CREATE FOREIGN TABLE leftover_entries (_id json, id int)
  SERVER mongo OPTIONS (collection 'idxtable.people.people_leftover');
SELECT count(*) FROM leftover_entries;

--
-- drop_index: the definition at once, the collection at commit; a
-- rollback keeps both
--
BEGIN;
SELECT idxtable.drop_index('people_leftover');
SELECT count(*) FROM idxtable.indexes WHERE name = 'people_leftover';
ROLLBACK;
SELECT count(*) FROM idxtable.indexes WHERE name = 'people_leftover';
SELECT count(*) FROM leftover_entries;
SELECT idxtable.drop_index('people_leftover');
SELECT count(*) FROM leftover_entries;
\! /usr/bin/python3 test/fixtures/index_collections.py | grep -c leftover
-- an unreachable server makes the commit fail and keeps the definition
\! /usr/bin/python3 test/fixtures/failpoint.py drop 0 --times 1 --close
SELECT idxtable.drop_index('types_upper');
SELECT count(*) FROM idxtable.indexes WHERE name = 'types_upper';
SELECT idxtable.drop_index('types_upper');
SELECT count(*) FROM idxtable.indexes WHERE name = 'types_upper';

--
-- RENAME keeps the definitions; a renamed key column leaves the index
-- unusable (a WARNING once per session, when a query on the table is
-- planned); DROP FOREIGN TABLE removes the definitions (the collections
-- stay in MongoDB)
--
ALTER FOREIGN TABLE accounts RENAME TO accounts2;
SELECT name, "table", keys FROM idxtable.indexes WHERE "table" = 'accounts2'::regclass ORDER BY name;
ALTER FOREIGN TABLE accounts2 RENAME TO accounts;
ALTER FOREIGN TABLE types RENAME COLUMN i8 TO i8_renamed;
SELECT count(*) FROM types;
SELECT count(*) FROM types;
SELECT idxtable.drop_index('types_keys');
-- so does a table that reads another collection now
ALTER FOREIGN TABLE movies OPTIONS (SET collection 'numbers');
SELECT count(*) FROM movies;
ALTER FOREIGN TABLE movies OPTIONS (SET collection 'movies');
SELECT count(*) FROM movies;
DROP FOREIGN TABLE objids_entries;
DROP FOREIGN TABLE objids;
SELECT count(*) FROM idxtable.indexes WHERE collection LIKE 'idxtable.objids.%';
\! /usr/bin/python3 test/fixtures/index_collections.py | grep objids
-- IMPORT FOREIGN SCHEMA leaves the index collections out
CREATE SCHEMA ix_import;
IMPORT FOREIGN SCHEMA idxtable_regress EXCEPT (bad) FROM SERVER mongo INTO ix_import;
SELECT foreign_table_name FROM information_schema.foreign_tables
 WHERE foreign_table_schema = 'ix_import' ORDER BY 1;
DROP SCHEMA ix_import CASCADE;

--
-- pg_dump dumps the definitions: restore into a second database
--
\set ix_db :DBNAME
\setenv IX_DB :ix_db
\! dropdb --if-exists regress_ix_restore 2>/dev/null
\! createdb regress_ix_restore
\! pg_dump "$IX_DB" | psql -X -q -v ON_ERROR_STOP=1 -d regress_ix_restore >/dev/null 2>&1 && echo restored
\c regress_ix_restore
SELECT name, "table", keys, include, "unique", state, entries FROM idxtable.indexes ORDER BY name;
\c :ix_db
\! dropdb regress_ix_restore
SET search_path = ix, public;

--
-- clean up: dropping every index leaves only the orphan of the dropped
-- table in MongoDB
--
SELECT idxtable.drop_index(name) FROM idxtable.indexes ORDER BY name;
\! /usr/bin/python3 test/fixtures/index_collections.py
DROP SCHEMA ix CASCADE;
DROP ROLE regress_ix_other;
