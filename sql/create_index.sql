--
-- create_index: CREATE INDEX, DROP INDEX, ALTER INDEX and REINDEX on
-- foreign tables of this FDW (the utility hook, index_utility.c) make and
-- change the same index tables as idxtable.create_index and its siblings.
-- Errors show their SQLSTATE (\echo :LAST_ERROR_SQLSTATE).
--
CREATE SCHEMA ci;
SET search_path = ci, public;
\set SHOW_CONTEXT never
CREATE FOREIGN TABLE ci_people (
  id int OPTIONS (field '_id'), name text, town text, age int,
  active boolean, score float8, joined timestamp,
  zip text OPTIONS (field 'address.zip')
) SERVER mongo OPTIONS (collection 'people');
CREATE FOREIGN TABLE ci_films (
  film_id int OPTIONS (field '_id'), title text, year int, actors text[]
) SERVER mongo OPTIONS (collection 'films');
-- the index-table lines of a query's plan (the rest differs by version)
CREATE FUNCTION ci_route(q text) RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
  line text;
BEGIN
  FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP
    IF line ~ 'Index Table:' THEN
      RETURN NEXT btrim(line);
    END IF;
  END LOOP;
END $$;
CREATE VIEW ci_indexes AS
  SELECT name, schemaname, tablename, state, entries, indexdef
    FROM idxtable.indexes WHERE schemaname = 'ci';

--
-- CREATE INDEX: default and given names, UNIQUE, lower() and upper(),
-- INCLUDE, ONLY, USING btree, a parenthesized column, pg_catalog.lower()
--
CREATE INDEX ON ci_people (town);
CREATE UNIQUE INDEX ON ci_people (lower(name));
CREATE INDEX ci_people_cover ON ONLY ci_people (upper(town), age)
  INCLUDE (name, joined);
CREATE INDEX ci_people_paren ON ci_people USING btree ((zip), pg_catalog.lower(town) ASC);
-- the function gives the next default name, as a second CREATE INDEX would
SELECT idxtable.create_index('ci_people', '{town}');
CREATE INDEX ON ci_people (town);
SELECT * FROM ci_indexes ORDER BY name;
-- the same definitions as the functions make
SELECT name, keys, include, is_unique FROM idxtable.index_defs
  WHERE name LIKE 'ci\_%' ORDER BY name;
-- a unique index over duplicate keys fails as create_index does
CREATE UNIQUE INDEX ci_people_town_key ON ci_people (town);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM ci_indexes WHERE name = 'ci_people_town_key';
-- an unknown column, as create_index
CREATE INDEX ON ci_people (nosuch);
\echo :LAST_ERROR_SQLSTATE

--
-- names: an index table's or a relation's of the table's schema (42P07),
-- skipped with a NOTICE under IF NOT EXISTS
--
CREATE INDEX ci_people_cover ON ci_people (age);
\echo :LAST_ERROR_SQLSTATE
CREATE INDEX IF NOT EXISTS ci_people_cover ON ci_people (age);
CREATE INDEX ci_films ON ci_people (age);
\echo :LAST_ERROR_SQLSTATE
CREATE INDEX IF NOT EXISTS ci_films ON ci_people (age);
SELECT count(*) FROM ci_indexes WHERE indexdef LIKE '%(age)';

--
-- what an index table cannot do: 0A000, named
--
CREATE INDEX ON ci_people (town) WHERE age > 30;
\echo :LAST_ERROR_SQLSTATE
CREATE INDEX ON ci_people USING hash (town);
\echo :LAST_ERROR_SQLSTATE
CREATE INDEX ON ci_people (town text_pattern_ops);
\echo :LAST_ERROR_SQLSTATE
CREATE INDEX ON ci_people (town COLLATE "C");
\echo :LAST_ERROR_SQLSTATE
CREATE INDEX ON ci_people (age DESC);
\echo :LAST_ERROR_SQLSTATE
CREATE INDEX ON ci_people (age NULLS FIRST);
\echo :LAST_ERROR_SQLSTATE
CREATE INDEX ON ci_people ((age + 1));
\echo :LAST_ERROR_SQLSTATE
CREATE INDEX ON ci_people (lower(town || 'x'));
\echo :LAST_ERROR_SQLSTATE
CREATE INDEX ON ci_people (substr(town, 1));
\echo :LAST_ERROR_SQLSTATE
CREATE INDEX ON ci_people (age) INCLUDE ((lower(name)));
\echo :LAST_ERROR_SQLSTATE
CREATE INDEX ON ci_people (age) WITH (fillfactor = 70);
\echo :LAST_ERROR_SQLSTATE
CREATE INDEX ON ci_people (age) TABLESPACE pg_default;
\echo :LAST_ERROR_SQLSTATE
CREATE UNIQUE INDEX ON ci_people (lower(name)) NULLS NOT DISTINCT;
\echo :LAST_ERROR_SQLSTATE
-- WITH (sharding = ...) is create_index's argument: checked the same way
CREATE INDEX ON ci_people (age) WITH (sharding = sideways);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM ci_indexes;

--
-- CONCURRENTLY: not in a transaction block (25001), as PostgreSQL's
--
BEGIN;
CREATE INDEX CONCURRENTLY ON ci_people (age);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT show_error('CREATE INDEX CONCURRENTLY ON ci.ci_people (age)');
-- a failed concurrent build leaves the index table 'failed', for DROP INDEX
-- (as create_index_concurrently does)
CREATE UNIQUE INDEX CONCURRENTLY ci_people_town_ukey ON ci_people (town);
\echo :LAST_ERROR_SQLSTATE
SELECT name, state FROM ci_indexes WHERE name = 'ci_people_town_ukey';
DROP INDEX ci_people_town_ukey;
-- CREATE INDEX inside a function (not CONCURRENTLY)
DO $$ BEGIN CREATE INDEX ci_people_in_do ON ci.ci_people (age); END $$;
SELECT name, state, indexdef FROM ci_indexes WHERE name = 'ci_people_in_do';
DROP INDEX ci_people_in_do;
-- routed through an index table that CREATE INDEX CONCURRENTLY made, with
-- the rows of a local table
CREATE INDEX CONCURRENTLY ci_films_year ON ci_films (year) INCLUDE (title);
ANALYZE ci_films;
SELECT name, state, entries, indexdef FROM ci_indexes WHERE name = 'ci_films_year';
CREATE TEMP TABLE local_films AS SELECT * FROM ci_films;
SELECT * FROM ci_route('SELECT film_id, title FROM ci.ci_films WHERE year = 1960');
SELECT count(*) FROM ci_films WHERE year = 1960;
(SELECT film_id, title FROM ci_films WHERE year = 1960
 EXCEPT ALL SELECT film_id, title FROM local_films WHERE year = 1960)
UNION ALL
(SELECT film_id, title FROM local_films WHERE year = 1960
 EXCEPT ALL SELECT film_id, title FROM ci_films WHERE year = 1960);
SELECT id, name, town FROM ci_people WHERE lower(name) = 'person07';

--
-- the listing's indexdef makes the index table again (pg_dump-able)
--
SELECT indexdef AS cover_def FROM ci_indexes WHERE name = 'ci_people_cover' \gset
SELECT keys AS cover_keys, include AS cover_include
  FROM idxtable.index_defs WHERE name = 'ci_people_cover' \gset
DROP INDEX ci_people_cover;
SELECT count(*) FROM ci_indexes WHERE name = 'ci_people_cover';
SELECT :'cover_def' \gexec
SELECT indexdef = :'cover_def' AS same_def, keys = :'cover_keys' AS same_keys,
       include = :'cover_include' AS same_include, i.state, i.entries
  FROM ci_indexes i JOIN idxtable.index_defs USING (name)
 WHERE name = 'ci_people_cover';

--
-- REINDEX INDEX and REINDEX TABLE rebuild index tables (rebuild_index)
--
REINDEX INDEX ci_people_cover;
REINDEX (VERBOSE) INDEX ci.ci_people_cover;
REINDEX TABLE ci_people;
SELECT name, state, entries FROM ci_indexes WHERE tablename = 'ci_people' ORDER BY name;
REINDEX INDEX CONCURRENTLY ci_people_cover;
\echo :LAST_ERROR_SQLSTATE
REINDEX (TABLESPACE pg_default) INDEX ci_people_cover;
\echo :LAST_ERROR_SQLSTATE
REINDEX INDEX ci_nosuch;
\echo :LAST_ERROR_SQLSTATE
CREATE FOREIGN TABLE ci_noindex (id int OPTIONS (field '_id'))
  SERVER mongo OPTIONS (collection 'people');
REINDEX TABLE ci_noindex;

--
-- ALTER INDEX ... RENAME TO renames an index table: its definition (the
-- same definition_id) and what is keyed by its name; its MongoDB
-- collection keeps its name, and its ownership marker names the new name
--
CREATE FOREIGN TABLE ci_owners (_id text, index text, created_as text,
  definition text) SERVER mongo OPTIONS (collection 'idxtable.owners');
CREATE INDEX ci_people_age ON ci_people (age) INCLUDE (name);
SELECT collection AS age_coll, definition_id AS age_def
  FROM idxtable.index_defs WHERE name = 'ci_people_age' \gset
-- (a row of idxtable.conflicts, as the applier writes them: {_id: 1})
INSERT INTO idxtable.conflicts VALUES ('ci_people_age', NULL, '1', '2', now(),
  '\x0e000000105f6964000100000000');
ALTER INDEX ci_people_age RENAME TO ci_people_years;
SELECT index_name, fact_id FROM idxtable.conflicts WHERE fact_id = '1';
DELETE FROM idxtable.conflicts WHERE index_name = 'ci_people_years';
SELECT d.name, d.collection = :'age_coll' AS same_collection,
       d.definition_id = :'age_def' AS same_definition, i.state, i.indexdef
  FROM idxtable.index_defs d JOIN ci_indexes i USING (name)
 WHERE d.name IN ('ci_people_age', 'ci_people_years');
SELECT _id = :'age_coll' AS same_collection, index, created_as
  FROM ci_owners WHERE definition = :'age_def';
-- queries go through it under its new name; writes maintain it
SELECT * FROM ci_route('SELECT name FROM ci.ci_people WHERE age = 32');
SELECT id, name FROM ci_people WHERE age = 32;
INSERT INTO ci_people (id, name, town, age) VALUES (9001, 'person_renamed', 'Oslo', 32);
UPDATE ci_people SET age = 33 WHERE id = 9001;
SELECT id, name FROM ci_people WHERE age = 33 ORDER BY id;
DELETE FROM ci_people WHERE id = 9001;
SELECT checked, missing, orphan, stale FROM idxtable.verify_index('ci_people_years');
-- a database restored from pg_dump finds its collection (index_defs is
-- dumped with the collection's name)
\set ci_db :DBNAME
\setenv CI_DB :ci_db
\! dropdb --if-exists regress_ci_restore 2>/dev/null
\! createdb regress_ci_restore
\! pg_dump "$CI_DB" | psql -X -q -v ON_ERROR_STOP=1 -d regress_ci_restore >/dev/null 2>&1 && echo restored
\c regress_ci_restore
SELECT collection = :'age_coll' AS same_collection, state
  FROM idxtable.index_defs WHERE name = 'ci_people_years';
-- (read as far as its applier, if any yet, has come)
SET idxtable.index_consistency = 'any';
SET idxtable.enable_plain_scan = off;
SELECT * FROM ci.ci_route('SELECT name FROM ci.ci_people WHERE age = 32');
SELECT id, name FROM ci.ci_people WHERE age = 32;
SELECT checked, missing, orphan, stale FROM idxtable.verify_index('ci_people_years');
\c :ci_db
\! dropdb regress_ci_restore
SET search_path = ci, public;
\set SHOW_CONTEXT never
-- the old name is free: a new index of that name gets a collection of its
-- own, as the renamed one keeps its collection
CREATE INDEX ci_people_age ON ci_people (age);
SELECT name, collection FROM idxtable.index_defs
 WHERE name IN ('ci_people_age', 'ci_people_years') ORDER BY name;
SELECT _id, index, created_as FROM ci_owners
 WHERE _id LIKE 'idxtable.people.ci\_people\_age%' ORDER BY _id;
SELECT checked, missing, orphan, stale FROM idxtable.verify_index('ci_people_age');
SELECT checked, missing, orphan, stale FROM idxtable.verify_index('ci_people_years');
-- a new name that an index table or a relation of the table's schema has
-- (42P07), or that cannot end a collection name (42602)
ALTER INDEX ci_people_age RENAME TO ci_people_years;
\echo :LAST_ERROR_SQLSTATE
ALTER INDEX ci_people_age RENAME TO ci_films;
\echo :LAST_ERROR_SQLSTATE
ALTER INDEX ci_people_age RENAME TO "ci.age";
\echo :LAST_ERROR_SQLSTATE
-- a rename rolled back leaves nothing, in MongoDB neither; renames in one
-- transaction (qualified, IF EXISTS) end in the last name
BEGIN;
ALTER INDEX ci_people_years RENAME TO ci_people_rolled;
SELECT name FROM idxtable.index_defs WHERE definition_id = :'age_def';
ROLLBACK;
SELECT name FROM idxtable.index_defs WHERE definition_id = :'age_def';
BEGIN;
SAVEPOINT s;
ALTER INDEX ci_people_years RENAME TO ci_people_rolled;
ROLLBACK TO s;
ALTER INDEX ci.ci_people_years RENAME TO ci_people_twice;
ALTER INDEX IF EXISTS ci_people_twice RENAME TO ci_people_yrs;
COMMIT;
SELECT name FROM idxtable.index_defs WHERE definition_id = :'age_def';
SELECT index, created_as FROM ci_owners WHERE definition = :'age_def';
-- unknown names are PostgreSQL's
ALTER INDEX ci_nosuch RENAME TO ci_nosuch2;
\echo :LAST_ERROR_SQLSTATE
ALTER INDEX IF EXISTS ci_nosuch RENAME TO ci_nosuch2;
-- DROP INDEX of the new name drops the collection; the other stays
DROP INDEX ci_people_yrs;
\! /usr/bin/python3 test/fixtures/index_collections.py | grep ci_people_age
SELECT count(*) FROM ci_owners WHERE definition = :'age_def';
DROP INDEX ci_people_age;
DROP FOREIGN TABLE ci_owners;

-- the applier follows a renamed index: a fact written straight into
-- MongoDB after the rename is applied (within 20 s; found through the index
-- with 'any', which does not wait for the applier)
\! /usr/bin/python3 test/fixtures/documents.py delete ci_rename '{}' >/dev/null
CREATE FOREIGN TABLE ci_out (_id text, town text)
  SERVER mongo OPTIONS (database 'idxtable_writes', collection 'ci_rename');
INSERT INTO ci_out VALUES ('1', 'Oslo');
CREATE INDEX ci_out_town ON ci_out (town);
DO $$
BEGIN
  FOR i IN 1..200 LOOP
    EXIT WHEN EXISTS (SELECT FROM idxtable.sync_status
                       WHERE name = 'ci_out_town' AND lag IS NOT NULL);
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
ALTER INDEX ci_out_town RENAME TO ci_out_place;
\! /usr/bin/python3 test/fixtures/documents.py insert ci_rename '{"_id": "2", "town": "Rome"}'
SET idxtable.index_consistency = 'any';
SET idxtable.enable_plain_scan = off;
DO $$
BEGIN
  FOR i IN 1..200 LOOP
    EXIT WHEN EXISTS (SELECT FROM ci.ci_out WHERE town = 'Rome') AND
              EXISTS (SELECT FROM idxtable.sync_status
                       WHERE name = 'ci_out_place' AND lag IS NOT NULL);
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
SELECT * FROM ci_route('SELECT _id FROM ci.ci_out WHERE town = ''Rome''');
SELECT _id, town FROM ci_out WHERE town = 'Rome';
RESET idxtable.index_consistency;
RESET idxtable.enable_plain_scan;
SELECT name, lag IS NOT NULL AS followed FROM idxtable.sync_status
 WHERE name LIKE 'ci\_out\_%';
SELECT checked, missing, orphan, stale FROM idxtable.verify_index('ci_out_place');
DROP INDEX ci_out_place;
DROP FOREIGN TABLE ci_out;

--
-- the other forms of ALTER INDEX cannot change an index table (0A000)
--
ALTER INDEX ci_people_cover SET (fillfactor = 50);
\echo :LAST_ERROR_SQLSTATE
ALTER INDEX ci_people_cover RESET (fillfactor);
\echo :LAST_ERROR_SQLSTATE
ALTER INDEX ci_people_cover SET TABLESPACE pg_default;
\echo :LAST_ERROR_SQLSTATE
ALTER INDEX ci_people_cover ALTER COLUMN 1 SET STATISTICS 100;
\echo :LAST_ERROR_SQLSTATE
ALTER INDEX ci_people_cover DEPENDS ON EXTENSION idxtable_fdw;
\echo :LAST_ERROR_SQLSTATE

--
-- a non-owner is refused (42501) by every form, before anything is locked
--
CREATE ROLE regress_ci_other;
GRANT USAGE ON SCHEMA ci TO regress_ci_other;
GRANT SELECT ON ci_people TO regress_ci_other;
SET ROLE regress_ci_other;
CREATE INDEX ON ci_people (age);
\echo :LAST_ERROR_SQLSTATE
CREATE INDEX CONCURRENTLY ON ci_people (age);
\echo :LAST_ERROR_SQLSTATE
DROP INDEX ci_people_cover;
\echo :LAST_ERROR_SQLSTATE
REINDEX INDEX ci_people_cover;
\echo :LAST_ERROR_SQLSTATE
ALTER INDEX ci_people_cover RENAME TO ci_people_theirs;
\echo :LAST_ERROR_SQLSTATE
REINDEX TABLE ci_people;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT count(*) FROM ci_indexes WHERE tablename = 'ci_people';
-- EXECUTE on the function is checked as a call would: an owner without it
-- is refused (42501)
GRANT USAGE ON FOREIGN SERVER mongo TO regress_ci_other;
GRANT CREATE ON SCHEMA ci TO regress_ci_other;
SET ROLE regress_ci_other;
CREATE FOREIGN TABLE ci_theirs (id int OPTIONS (field '_id'), town text)
  SERVER mongo OPTIONS (collection 'people');
RESET ROLE;
REVOKE EXECUTE ON FUNCTION
  idxtable.create_index(regclass, text[], text[], boolean, text, text) FROM PUBLIC;
SET ROLE regress_ci_other;
CREATE INDEX ON ci_theirs (town);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
GRANT EXECUTE ON FUNCTION
  idxtable.create_index(regclass, text[], text[], boolean, text, text) TO PUBLIC;
DROP FOREIGN TABLE ci_theirs;
REVOKE USAGE ON FOREIGN SERVER mongo FROM regress_ci_other;

--
-- another FDW's foreign table and ordinary indexes are PostgreSQL's
--
CREATE FOREIGN DATA WRAPPER ci_other_fdw;
CREATE SERVER ci_other FOREIGN DATA WRAPPER ci_other_fdw;
CREATE FOREIGN TABLE ci_elsewhere (a int) SERVER ci_other;
CREATE INDEX ON ci_elsewhere (a);
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE ci_local (a int);
CREATE INDEX ci_local_a ON ci_local (a);
CREATE INDEX ci_local_b ON ci_local (a);
REINDEX INDEX ci_local_a;
ALTER INDEX ci_local_b RENAME TO ci_local_c;

--
-- DROP INDEX: index tables and ordinary indexes in one list, IF EXISTS,
-- qualified names, CONCURRENTLY
--
DROP INDEX ci_nosuch;
\echo :LAST_ERROR_SQLSTATE
DROP INDEX IF EXISTS ci_nosuch, ci_people_town_idx1;
-- a qualified name is an index table's only in its table's schema
DROP INDEX public.ci_people_paren;
\echo :LAST_ERROR_SQLSTATE
-- an error on an ordinary index undoes the whole statement
DROP INDEX ci.ci_people_paren, ci_local_nosuch;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM ci_indexes WHERE name = 'ci_people_paren';
DROP INDEX ci.ci_people_paren, ci_local_a RESTRICT;
SELECT count(*) FROM ci_indexes WHERE name = 'ci_people_paren';
SELECT relname FROM pg_class WHERE relname LIKE 'ci\_local\_%' ORDER BY 1;
BEGIN;
DROP INDEX CONCURRENTLY ci_people_town_idx;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
DROP INDEX CONCURRENTLY ci_people_town_idx, ci_people_cover;
\echo :LAST_ERROR_SQLSTATE
DROP INDEX CONCURRENTLY ci_people_town_idx;
DROP INDEX CONCURRENTLY IF EXISTS ci_people_town_idx;
SELECT name FROM ci_indexes ORDER BY name;

-- clean up: the index tables, then the tables
DROP INDEX ci_people_cover, ci_people_name_idx, ci_people_town_idx2,
  ci_films_year, ci_local_c;
SELECT count(*) FROM ci_indexes;
\set VERBOSITY terse
DROP SCHEMA ci CASCADE;
\set VERBOSITY default
DROP SERVER ci_other;
DROP FOREIGN DATA WRAPPER ci_other_fdw;
DROP ROLE regress_ci_other;
RESET search_path;
