/*-------------------------------------------------------------------------
 *
 * idxtable_fdw--0.1.sql
 *		  Version 0.1 of the extension: the foreign data wrapper, and the
 *		  idxtable schema (index definitions and their functions, unique
 *		  key conflicts, the applier's status views).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  idxtable_fdw--0.1.sql
 *
 *-------------------------------------------------------------------------
 */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION idxtable_fdw" to load this file. \quit

CREATE FUNCTION idxtable_fdw_handler()
RETURNS fdw_handler
AS 'MODULE_PATHNAME'
LANGUAGE C STRICT;

CREATE FUNCTION idxtable_fdw_validator(text[], oid)
RETURNS void
AS 'MODULE_PATHNAME'
LANGUAGE C STRICT;

CREATE FOREIGN DATA WRAPPER idxtable_fdw
  HANDLER idxtable_fdw_handler
  VALIDATOR idxtable_fdw_validator;

COMMENT ON FOREIGN DATA WRAPPER idxtable_fdw IS
  'MongoDB collections as foreign tables, with FDW-maintained index collections';

CREATE FUNCTION idxtable_fdw_disconnect_all()
RETURNS bool
AS 'MODULE_PATHNAME'
LANGUAGE C STRICT PARALLEL RESTRICTED;

-- Index tables: definitions, their view, and the functions that create and
-- drop them.  The definitions are dumped by pg_dump (the index collections
-- stay in MongoDB), so a restored database finds its indexes again.
CREATE SCHEMA idxtable;

CREATE TABLE idxtable.index_defs (
  name text PRIMARY KEY,
  tbl regclass NOT NULL,
  keys text[] NOT NULL,
  include text[] NOT NULL DEFAULT '{}',
  is_unique boolean NOT NULL,
  -- the MongoDB collection of the entries, named by create_index after the
  -- table's collection and the index; it keeps its name when the index is
  -- renamed
  collection text NOT NULL,
  state text NOT NULL CHECK (state IN ('building', 'valid', 'stale', 'failed')),
  entries bigint,
  distinct_keys bigint,
  -- names this definition in the ownership marker of its index collection
  -- (MongoDB collection idxtable.owners), so that a definition re-created
  -- with the same name is told apart
  definition_id uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid(),
  -- the MongoDB cluster time, packed as (seconds << 32) | increment, from
  -- which the change-stream applier re-applies the writes of any client to
  -- this index: taken before its build read the facts; NULL if unknown
  sync_from bigint,
  -- per key: the collation whose sort keys the entries hold (a text key
  -- under a collation that does not order as bytes do), else NULL; NULL
  -- for no such key
  key_collations regcollation[],
  -- per key: that collation's version (idxtable.collation_version) when
  -- the entries were written; another version makes the index stale for
  -- reads until verify_index finds it intact, or repair_index or
  -- rebuild_index rewrites it
  collation_versions text[],
  -- how the index collection is sharded on a sharded cluster (mongos): by
  -- the leading key "_id.k0", 'ranged' or 'hashed', or 'none' (unsharded,
  -- on the database's primary shard); create_index decides it once
  sharding text NOT NULL DEFAULT 'none'
    CHECK (sharding IN ('none', 'ranged', 'hashed'))
);

COMMENT ON TABLE idxtable.index_defs IS
  'Index tables of idxtable_fdw foreign tables (one MongoDB collection each)';

SELECT pg_catalog.pg_extension_config_dump('idxtable.index_defs', '');

-- Backends cache the definitions (and plans using them): every change of
-- a row, whoever makes it, invalidates the relcache entry of its table.
CREATE FUNCTION idxtable.index_defs_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'idxtable_index_defs_changed'
LANGUAGE C;

CREATE TRIGGER index_defs_changed
  AFTER INSERT OR UPDATE OR DELETE ON idxtable.index_defs
  FOR EACH ROW EXECUTE FUNCTION idxtable.index_defs_changed();

-- Unique key conflicts made by writers outside PostgreSQL: fact_id should
-- have the key of a unique index, whose claim holder_id holds and has the
-- key too.  Written by the change-stream applier and by repair_index (which
-- first forgets its index's rows); runtime data, not dumped.  A user sees
-- the rows of the indexes of the tables he may read.  fact_bson is
-- fact_id exactly, as the BSON document {"_id": <fact _id>} (fact_id, text
-- for people, is cut after 100 characters): the applier finds by
-- holder_id the facts that wait for a key their holder may have freed.
-- The rows follow their index through ALTER INDEX ... RENAME TO.
CREATE TABLE idxtable.conflicts (
  index_name text NOT NULL
    REFERENCES idxtable.index_defs (name) ON UPDATE CASCADE ON DELETE CASCADE,
  key text,
  fact_id text NOT NULL,
  holder_id text NOT NULL,
  found_at timestamptz NOT NULL,
  fact_bson bytea NOT NULL,
  PRIMARY KEY (index_name, fact_id, holder_id)
);

COMMENT ON TABLE idxtable.conflicts IS
  'Unique keys of index tables that two facts share, written around the FDW';

ALTER TABLE idxtable.conflicts ENABLE ROW LEVEL SECURITY;
CREATE POLICY conflicts_readable ON idxtable.conflicts FOR SELECT
  USING (EXISTS (SELECT 1 FROM idxtable.index_defs d
                  WHERE d.name OPERATOR(pg_catalog.=) index_name
                    AND pg_catalog.has_table_privilege(d.tbl, 'SELECT')));
GRANT SELECT ON idxtable.conflicts TO PUBLIC;

-- The version of a collation as its provider reports it now (the database
-- default's included, which pg_collation_actual_version leaves NULL)
CREATE FUNCTION idxtable.collation_version(regcollation)
RETURNS text
AS 'MODULE_PATHNAME', 'idxtable_collation_version'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

CREATE VIEW idxtable.indexes AS
  SELECT name, tbl AS "table", keys, include, is_unique AS "unique",
         collection,
         CASE WHEN state OPERATOR(pg_catalog.=) 'valid' AND EXISTS (
                SELECT 1
                  FROM ROWS FROM (pg_catalog.unnest(key_collations),
                                  pg_catalog.unnest(collation_versions))
                       AS c(coll, version)
                 WHERE c.coll IS NOT NULL
                   AND c.version IS DISTINCT FROM
                       idxtable.collation_version(c.coll))
              THEN 'stale' ELSE state END AS state,
         entries, sharding,
         -- as pg_indexes: the table's schema and name, the index's name,
         -- and the CREATE INDEX statement that makes the index table again
         -- (NULL for a definition whose table is gone)
         n.nspname AS schemaname, c.relname AS tablename, name AS indexname,
         CASE WHEN c.oid IS NOT NULL THEN
         pg_catalog.format('CREATE %sINDEX %I ON %I.%I (%s)%s%s',
                           CASE WHEN is_unique THEN 'UNIQUE ' ELSE '' END,
                           name, n.nspname, c.relname,
                           pg_catalog.array_to_string(keys, ', '),
                           CASE WHEN pg_catalog.cardinality(include)
                                     OPERATOR(pg_catalog.>) 0
                                THEN pg_catalog.format(' INCLUDE (%s)',
                                       pg_catalog.array_to_string(include, ', '))
                                ELSE '' END,
                           CASE WHEN sharding OPERATOR(pg_catalog.<>) 'none'
                                THEN pg_catalog.format(' WITH (sharding = %s)',
                                                       sharding)
                                ELSE '' END) END AS indexdef
    FROM idxtable.index_defs
         LEFT JOIN pg_catalog.pg_class c
           ON c.oid OPERATOR(pg_catalog.=) tbl::pg_catalog.oid
         LEFT JOIN pg_catalog.pg_namespace n
           ON n.oid OPERATOR(pg_catalog.=) c.relnamespace;

GRANT USAGE ON SCHEMA idxtable TO PUBLIC;
GRANT SELECT ON idxtable.index_defs, idxtable.indexes TO PUBLIC;

CREATE FUNCTION idxtable.create_index(tbl regclass, keys text[],
                                      include text[] DEFAULT '{}',
                                      is_unique boolean DEFAULT false,
                                      name text DEFAULT NULL,
                                      sharding text DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'idxtable_create_index'
LANGUAGE C VOLATILE;

-- Like CREATE INDEX CONCURRENTLY: commits the definition as 'building'
-- (maintained by writes from then on), builds it without blocking writes
-- through the FDW, then commits it 'valid'.  Not in a transaction block;
-- a failed build leaves the definition 'failed', for drop_index.
CREATE PROCEDURE idxtable.create_index_concurrently(tbl regclass, keys text[],
                                                    include text[] DEFAULT '{}',
                                                    is_unique boolean DEFAULT false,
                                                    name text DEFAULT NULL,
                                                    sharding text DEFAULT NULL)
AS 'MODULE_PATHNAME', 'idxtable_create_index_concurrently'
LANGUAGE C;

-- Fill an index again from all facts (a stale one, for instance) and mark
-- it valid; returns the number of entries.
CREATE FUNCTION idxtable.rebuild_index(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'idxtable_rebuild_index'
LANGUAGE C STRICT VOLATILE;

CREATE FUNCTION idxtable.drop_index(name text)
RETURNS void
AS 'MODULE_PATHNAME', 'idxtable_drop_index'
LANGUAGE C STRICT VOLATILE;

-- What of an index collection does not match the facts of its table:
-- missing = fact without its entry, orphan = entry without its fact,
-- stale = entry whose key or included values differ from its fact's,
-- unconvertible = fact whose values do not fit their columns (skipped),
-- conflicts = fact whose unique key another fact has and holds the claim of
-- (a fact once, however many of its keys are held).
CREATE FUNCTION idxtable.verify_index(name text)
RETURNS TABLE (checked bigint, missing bigint, orphan bigint, stale bigint,
               unconvertible bigint, conflicts bigint)
AS 'MODULE_PATHNAME', 'idxtable_verify_index'
LANGUAGE C STRICT VOLATILE;

-- Fix what verify_index finds; the same columns count what was fixed
-- (conflicts: what was found and left in place, now in idxtable.conflicts).
CREATE FUNCTION idxtable.repair_index(name text)
RETURNS TABLE (checked bigint, missing bigint, orphan bigint, stale bigint,
               unconvertible bigint, conflicts bigint)
AS 'MODULE_PATHNAME', 'idxtable_repair_index'
LANGUAGE C STRICT VOLATILE;

-- Dropping a foreign table drops its index definitions (RENAME needs
-- nothing: tbl is a regclass).  The index collections stay in MongoDB, as
-- the table's own collection does.
CREATE FUNCTION idxtable.drop_table_indexes()
RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  DELETE FROM idxtable.index_defs
   WHERE tbl::oid IN (SELECT objid FROM pg_event_trigger_dropped_objects()
                       WHERE classid = 'pg_class'::regclass AND objsubid = 0);
END
$$;

CREATE EVENT TRIGGER idxtable_drop_table_indexes ON sql_drop
  EXECUTE FUNCTION idxtable.drop_table_indexes();

-- The change-stream applier (idxtable_fdw in shared_preload_libraries):
-- what the appliers report of each index table, and the appliers of this
-- database.  Both are empty without the library preloaded.  No secrets:
-- last_error holds the FDW's own messages, never a URI.
CREATE FUNCTION idxtable.sync_status()
RETURNS TABLE (definition_id uuid, streaming boolean,
               applied_through timestamptz, caught_up_at timestamptz,
               events_applied bigint, entries_written bigint,
               conflicts bigint, last_error text,
               skips_fdw_transactions boolean)
AS 'MODULE_PATHNAME', 'idxtable_sync_status'
LANGUAGE C STRICT VOLATILE;

-- One row per index table; lag is NULL when no applier follows it, and
-- counts from the later of applied_through (whole seconds) and
-- caught_up_at, the last time every event committed before it was applied
-- (an empty batch: its answer; a batch below the batch size: its getMore's
-- sending), so an idle server lags by nothing and a steady load by its
-- real lag; conflicts counts the facts in the index's rows of
-- idxtable.conflicts (a fact once, however many keys other facts hold of
-- it, as verify_index and repair_index count them);
-- skips_fdw_transactions is true while the applier's change stream leaves
-- out the FDW's own transactions, which need nothing from it.
CREATE VIEW idxtable.sync_status AS
  SELECT d.name, d.state, s.applied_through,
         CASE WHEN s.streaming THEN
           GREATEST(pg_catalog.clock_timestamp()
                                 OPERATOR(pg_catalog.-)
                               GREATEST(s.applied_through, s.caught_up_at),
                               interval '0')
         END AS lag,
         s.events_applied, s.entries_written,
         (SELECT pg_catalog.count(DISTINCT c.fact_bson)
            FROM idxtable.conflicts c
           WHERE c.index_name OPERATOR(pg_catalog.=) d.name) AS conflicts,
         s.last_error, s.skips_fdw_transactions
    FROM idxtable.index_defs d
    LEFT JOIN idxtable.sync_status() s
      ON s.definition_id OPERATOR(pg_catalog.=) d.definition_id;

CREATE FUNCTION idxtable.appliers()
RETURNS TABLE (serverid oid, ownerid oid, pid integer, state text,
               started_at timestamptz, last_batch_at timestamptz,
               restarts integer, last_error text)
AS 'MODULE_PATHNAME', 'idxtable_appliers'
LANGUAGE C STRICT VOLATILE;

CREATE VIEW idxtable.appliers AS
  SELECT s.srvname AS server, pg_catalog.pg_get_userbyid(a.ownerid) AS owner,
         a.pid, a.state, a.started_at, a.last_batch_at, a.restarts,
         a.last_error
    FROM idxtable.appliers() a
    LEFT JOIN pg_catalog.pg_foreign_server s
      ON s.oid OPERATOR(pg_catalog.=) a.serverid;

GRANT SELECT ON idxtable.sync_status, idxtable.appliers TO PUBLIC;
