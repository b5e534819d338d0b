--
-- plan_stats: planning before ANALYZE, and the per-backend cache of index
-- definitions.  A never-analyzed table is planned from what MongoDB says
-- of its collection, asked once by planning and cached by the backend: its
-- document count and mean document size ($collStats), else a valid index
-- table's entries, else a default.  A change of index_defs in another
-- session (create_index, drop_index, a state change) is seen by the next
-- planning here, cached plans included.
--
-- server mongo_nostream: no applier, so routing needs 'any'
SET idxtable.index_consistency = 'any';
CREATE FOREIGN TABLE ps_numbers (id int OPTIONS (field '_id'), v int, label text)
  SERVER mongo_nostream OPTIONS (collection 'numbers');
CREATE FOREIGN TABLE ps_people (id int OPTIONS (field '_id'), name text)
  SERVER mongo_nostream OPTIONS (collection 'people');
CREATE FOREIGN TABLE ps_empty (id int OPTIONS (field '_id'))
  SERVER mongo_nostream OPTIONS (collection 'empty');
SELECT relname, reltuples FROM pg_class
 WHERE relname IN ('ps_numbers', 'ps_people', 'ps_empty') ORDER BY 1;

-- 1. no statistics, no index table: planning (EXPLAIN alone too) asks
-- MongoDB for the collection's count and size, once: the backend keeps them
EXPLAIN SELECT * FROM ps_people;
EXPLAIN SELECT * FROM ps_people;
SELECT count(*) FROM ps_people;
-- the ask is not one of the scan's round trips
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT * FROM ps_empty;
-- an empty collection's count is not taken: it may have been filled since
EXPLAIN SELECT * FROM ps_empty;

-- 2. a valid index table: its entries are the table's size, and a
-- selective lookup uses it without ANALYZE
SELECT idxtable.create_index('ps_numbers', '{v}', name => 'ps_numbers_v');
SELECT state, entries FROM idxtable.index_defs WHERE name = 'ps_numbers_v';
EXPLAIN SELECT * FROM ps_numbers;
EXPLAIN SELECT * FROM ps_numbers WHERE v = 3;
SELECT count(*), min(id), max(id) FROM ps_numbers WHERE v = 3;
SET idxtable.enable_index_routing = off;
SELECT count(*), min(id), max(id) FROM ps_numbers WHERE v = 3;
RESET idxtable.enable_index_routing;
SELECT relname, reltuples FROM pg_class WHERE relname = 'ps_numbers';

-- 3. changes made by another session reach this one's cache and plans
CREATE EXTENSION dblink;
SELECT dblink_connect('other',
         format('dbname=%s user=%s port=%s host=%s', current_database(),
                current_user, current_setting('port'),
                split_part(current_setting('unix_socket_directories'), ',', 1)));
SET plan_cache_mode = force_generic_plan;
PREPARE ps_q(int) AS SELECT count(*) FROM ps_numbers WHERE v = $1;
EXPLAIN (COSTS OFF) EXECUTE ps_q(3);
EXPLAIN (COSTS OFF) SELECT * FROM ps_numbers WHERE v = 3;
-- drop_index there: planned without the index here
SELECT * FROM dblink('other', $$SELECT idxtable.drop_index('ps_numbers_v')::text$$)
  AS t(dropped text);
EXPLAIN (COSTS OFF) SELECT * FROM ps_numbers WHERE v = 3;
EXPLAIN (COSTS OFF) EXECUTE ps_q(3);
EXECUTE ps_q(3);
-- create_index there: routed here again
SELECT * FROM dblink('other',
  $$SELECT idxtable.create_index('ps_numbers', '{v}', name => 'ps_numbers_v')$$)
  AS t(created text);
EXPLAIN (COSTS OFF) SELECT * FROM ps_numbers WHERE v = 3;
EXPLAIN (COSTS OFF) EXECUTE ps_q(3);
-- a state change by hand (as the applier makes them) there: not routed
SELECT dblink_exec('other',
  $$UPDATE idxtable.index_defs SET state = 'stale' WHERE name = 'ps_numbers_v'$$);
EXPLAIN (COSTS OFF) SELECT * FROM ps_numbers WHERE v = 3;
EXPLAIN (COSTS OFF) EXECUTE ps_q(3);
SELECT dblink_exec('other',
  $$UPDATE idxtable.index_defs SET state = 'valid' WHERE name = 'ps_numbers_v'$$);
EXPLAIN (COSTS OFF) EXECUTE ps_q(3);
EXECUTE ps_q(3);
-- and one's own changes at once, also inside a transaction that rolls back
BEGIN;
UPDATE idxtable.index_defs SET state = 'stale' WHERE name = 'ps_numbers_v';
EXPLAIN (COSTS OFF) SELECT * FROM ps_numbers WHERE v = 3;
ROLLBACK;
EXPLAIN (COSTS OFF) SELECT * FROM ps_numbers WHERE v = 3;
DEALLOCATE ps_q;
RESET plan_cache_mode;
SELECT dblink_disconnect('other');
DROP EXTENSION dblink;

-- 4. a never-analyzed table whose only index table is multi-valued (its
-- entries are not its rows): 5,000 documents, as MongoDB says.  A rare
-- actor is found through the index table: the scan would return every
-- document, in 5 batches, since = ANY(actors) is evaluated here
CREATE FOREIGN TABLE ps_cast (id int OPTIONS (field '_id'), title text, year int,
                              actors text[])
  SERVER mongo_nostream OPTIONS (database 'idxtable_order', collection 'cast');
SELECT idxtable.create_index('ps_cast', '{actors}', name => 'ps_cast_actors');
SELECT relname, reltuples FROM pg_class WHERE relname = 'ps_cast';
EXPLAIN SELECT * FROM ps_cast;
EXPLAIN SELECT * FROM ps_cast WHERE 'Actor 7' = ANY(actors);
SELECT count(*), min(id), max(id) FROM ps_cast WHERE 'Actor 7' = ANY(actors);
SET idxtable.enable_index_routing = off;
EXPLAIN SELECT * FROM ps_cast WHERE 'Actor 7' = ANY(actors);
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT * FROM ps_cast WHERE 'Actor 7' = ANY(actors);
SELECT count(*), min(id), max(id) FROM ps_cast WHERE 'Actor 7' = ANY(actors);
RESET idxtable.enable_index_routing;
-- the scan still wins where MongoDB filters and the filter lets a third
-- of the documents through (the default selectivity of a range): the
-- index table would fetch them one batch of facts after another
SELECT idxtable.create_index('ps_cast', '{year}', name => 'ps_cast_year');
EXPLAIN SELECT * FROM ps_cast WHERE year >= 1950;
EXPLAIN SELECT * FROM ps_cast WHERE year = 1977;
SELECT count(*) FROM ps_cast WHERE year >= 1950;
-- after ANALYZE, the same plans
ANALYZE ps_cast;
EXPLAIN (COSTS OFF) SELECT * FROM ps_cast WHERE 'Actor 7' = ANY(actors);
EXPLAIN (COSTS OFF) SELECT * FROM ps_cast WHERE year >= 1950;
EXPLAIN (COSTS OFF) SELECT * FROM ps_cast WHERE year = 1977;
SELECT idxtable.drop_index('ps_cast_actors');
SELECT idxtable.drop_index('ps_cast_year');
DROP FOREIGN TABLE ps_cast;

-- 4b. a skewed key, never analyzed: 2,700 of 3,000 documents in Redmond,
-- 10 in each of 30 other towns.  Without column statistics an equality's
-- selectivity is PostgreSQL's default (0.5%); planning asks MongoDB how
-- many entries constant conditions select (use_remote_estimate, on by
-- default), so Redmond is scanned and a rare town read through the index
-- table, as after ANALYZE
CREATE FOREIGN TABLE ps_skew (id int OPTIONS (field '_id'), town text)
  SERVER mongo_nostream OPTIONS (database 'idxtable_order', collection 'skew');
SELECT idxtable.create_index('ps_skew', '{town}', name => 'ps_skew_town');
EXPLAIN SELECT * FROM ps_skew WHERE town = 'Redmond';
EXPLAIN SELECT * FROM ps_skew WHERE town = 'Town 07';
-- with another clause: the count costs the path, the rows stay PostgreSQL's
EXPLAIN SELECT * FROM ps_skew WHERE town = 'Town 07' AND id > 100;
-- IN lists, ranges and IS NULL are counted too
EXPLAIN SELECT * FROM ps_skew WHERE town IN ('Town 07', 'Town 08');
EXPLAIN (COSTS OFF) SELECT * FROM ps_skew WHERE town IN ('Redmond', 'Town 08');
EXPLAIN SELECT * FROM ps_skew WHERE town >= 'T';
EXPLAIN (COSTS OFF) SELECT * FROM ps_skew WHERE town <= 'T';
EXPLAIN SELECT * FROM ps_skew WHERE town IS NULL;
-- the count is none of the scan's round trips
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT * FROM ps_skew WHERE town = 'Town 07';
SELECT count(*), min(id), max(id) FROM ps_skew WHERE town = 'Redmond';
SELECT count(*), min(id), max(id) FROM ps_skew WHERE town = 'Town 07';
SELECT count(*) FROM ps_skew WHERE town IN ('Redmond', 'Town 08');
-- a generic plan's parameter is not counted: the default selectivity
SET plan_cache_mode = force_generic_plan;
PREPARE ps_town(text) AS SELECT * FROM ps_skew WHERE town = $1;
EXPLAIN (COSTS OFF) EXECUTE ps_town('Redmond');
DEALLOCATE ps_town;
RESET plan_cache_mode;
-- nor with the option off, on the table or its server
ALTER FOREIGN TABLE ps_skew OPTIONS (ADD use_remote_estimate 'off');
EXPLAIN (COSTS OFF) SELECT * FROM ps_skew WHERE town = 'Redmond';
ALTER SERVER mongo_nostream OPTIONS (ADD use_remote_estimate 'off');
ALTER FOREIGN TABLE ps_skew OPTIONS (DROP use_remote_estimate);
EXPLAIN (COSTS OFF) SELECT * FROM ps_skew WHERE town = 'Redmond';
-- the table's option before the server's
ALTER FOREIGN TABLE ps_skew OPTIONS (ADD use_remote_estimate 'on');
EXPLAIN (COSTS OFF) SELECT * FROM ps_skew WHERE town = 'Redmond';
ALTER SERVER mongo_nostream OPTIONS (DROP use_remote_estimate);
ALTER FOREIGN TABLE ps_skew OPTIONS (DROP use_remote_estimate);
SELECT show_error($$ALTER FOREIGN TABLE ps_skew OPTIONS (ADD use_remote_estimate 'maybe')$$);
SELECT show_error($$ALTER USER MAPPING FOR CURRENT_USER SERVER mongo_nostream
                    OPTIONS (ADD use_remote_estimate 'on')$$);
-- after ANALYZE, the same plans, from the statistics
ANALYZE ps_skew;
EXPLAIN (COSTS OFF) SELECT * FROM ps_skew WHERE town = 'Redmond';
EXPLAIN (COSTS OFF) SELECT * FROM ps_skew WHERE town = 'Town 07';
SELECT idxtable.drop_index('ps_skew_town');
DROP FOREIGN TABLE ps_skew;

-- 5. the trigger function is index_defs' alone
SELECT show_error('SELECT idxtable.index_defs_changed()');
CREATE TABLE ps_other (tbl regclass);
CREATE TRIGGER ps_other_changed AFTER INSERT ON ps_other
  FOR EACH ROW EXECUTE FUNCTION idxtable.index_defs_changed();
SELECT show_error($$INSERT INTO ps_other VALUES ('ps_numbers')$$);
DROP TABLE ps_other;

-- clean up
SELECT idxtable.drop_index('ps_numbers_v');
DROP FOREIGN TABLE ps_numbers, ps_people, ps_empty;
RESET idxtable.index_consistency;
