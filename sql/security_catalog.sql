--
-- security_catalog: the FDW's catalog SQL cannot be hijacked through the
-- caller's search_path, and the index functions check privileges before
-- they lock the table (the two-session side of that is
-- test/security_locks.py).  Self-contained: needs only setup.sql (the
-- extension and show_error()); makes its own roles, server and tables and
-- drops them at the end.
--
\getenv mongo_uri MONGO_URI
SELECT current_user AS regress_superuser \gset
CREATE ROLE regress_seccat_owner LOGIN;
CREATE ROLE regress_seccat_other LOGIN;
GRANT CREATE ON SCHEMA public TO regress_seccat_owner;
CREATE SERVER regress_seccat_srv FOREIGN DATA WRAPPER idxtable_fdw
  OPTIONS (uri :'mongo_uri', database 'idxtable_regress');
GRANT USAGE ON FOREIGN SERVER regress_seccat_srv
  TO regress_seccat_owner, regress_seccat_other;
--
-- Item 1 of issue 9, as filed: a table owner with USAGE on a server, a user
-- mapping and CREATE on public puts its own "=" first in its search_path
-- and runs ANALYZE, which records the index statistics in
-- idxtable.index_defs as that table's owner.  The role must stay an
-- ordinary role, and ANALYZE must still record the statistics.
--
\c - regress_seccat_owner
\set server regress_seccat_srv
\i test/fixtures/user_mapping.sql
CREATE FOREIGN TABLE m_t (_id text, k text) SERVER regress_seccat_srv OPTIONS (collection 'm_t');
INSERT INTO m_t (k) VALUES ('x'); SELECT idxtable.create_index('m_t','{k}');
CREATE FUNCTION public.texteq(a text,b text) RETURNS bool LANGUAGE plpgsql AS $$
BEGIN IF current_user <> session_user THEN EXECUTE 'ALTER ROLE ' || session_user || ' SUPERUSER'; END IF;
RETURN pg_catalog.texteq(a,b); END $$;
CREATE OPERATOR public.= (LEFTARG=text, RIGHTARG=text, FUNCTION=public.texteq);
SET search_path = public, pg_catalog;  ANALYZE m_t;
SELECT rolname, rolsuper FROM pg_roles WHERE rolname = session_user;
-- the statistics were written: one entry, one distinct key
SELECT name, entries, distinct_keys FROM idxtable.index_defs WHERE tbl = 'm_t'::regclass;
INSERT INTO m_t (k) VALUES ('y'), ('y');
ANALYZE m_t;
SELECT name, entries, distinct_keys FROM idxtable.index_defs WHERE tbl = 'm_t'::regclass;
SELECT rolname, rolsuper FROM pg_roles WHERE rolname = session_user;
--
-- The other entry points, with the same search_path: create_index (name
-- lookups, the definition's insert and its validation), verify_index,
-- repair_index and drop_index.  Each works, and the role stays ordinary.
--
SELECT idxtable.create_index('m_t', '{k}', name => 'm_t_k_named');
SELECT idxtable.create_index('m_t', '{k}');   -- a default name that is taken
SELECT * FROM idxtable.verify_index('m_t_k_named');
SELECT * FROM idxtable.repair_index('m_t_k_named');
SELECT idxtable.drop_index('m_t_k_idx1');
SELECT show_error($$SELECT idxtable.drop_index('m_t_k_idx1')$$);
SELECT show_error($$SELECT idxtable.create_index('m_t', '{k}', name => 'm_t_k_named')$$);
SELECT name, state, entries FROM idxtable.index_defs WHERE tbl = 'm_t'::regclass ORDER BY name;
SELECT rolname, rolsuper FROM pg_roles WHERE rolname = session_user;
-- the role's "=" is still the one its own SQL finds first
SELECT '=(text,text)'::regoperator = 'public.=(text,text)'::regoperator AS hostile_first;
RESET search_path;
--
-- Item 7: privileges come before locks.  A role that does not own the table
-- gets 42501 from create_index, drop_index and repair_index, and without
-- SELECT from verify_index (test/security_locks.py shows that it never
-- waits for, or blocks, a lock on the table).
--
\c - regress_seccat_other
SELECT show_error($$SELECT idxtable.create_index('m_t', '{k}', name => 'other_idx')$$);
SELECT show_error($$SELECT idxtable.drop_index('m_t_k_named')$$);
SELECT show_error($$SELECT * FROM idxtable.verify_index('m_t_k_named')$$);
SELECT show_error($$SELECT * FROM idxtable.repair_index('m_t_k_named')$$);
-- a table that is not an idxtable_fdw foreign table, owned by someone else
SELECT show_error($$SELECT idxtable.create_index('pg_catalog.pg_class', '{relname}')$$);
-- an index that does not exist is reported as such
SELECT show_error($$SELECT idxtable.drop_index('no_such_index')$$);
-- nothing happened to the owner's indexes
SELECT name, state FROM idxtable.index_defs WHERE tbl = 'm_t'::regclass ORDER BY name;
-- with SELECT on the table, verify_index is allowed; repair_index is not
\c - regress_seccat_owner
GRANT SELECT ON m_t TO regress_seccat_other;
\c - regress_seccat_other
\set server regress_seccat_srv
\i test/fixtures/user_mapping.sql
SELECT * FROM idxtable.verify_index('m_t_k_named');
SELECT show_error($$SELECT * FROM idxtable.repair_index('m_t_k_named')$$);
DROP USER MAPPING FOR CURRENT_USER SERVER regress_seccat_srv;
--
-- Clean up: the documents, the indexes, the role's operator and objects.
--
\c - regress_seccat_owner
SELECT idxtable.drop_index('m_t_k_named');
SELECT idxtable.drop_index('m_t_k_idx');
DELETE FROM m_t;
-- the event trigger that forgets a dropped table's definitions, under the
-- same search_path
SET search_path = public, pg_catalog;
DROP FOREIGN TABLE m_t;
SELECT rolname, rolsuper FROM pg_roles WHERE rolname = session_user;
RESET search_path;
DROP OPERATOR public.= (text, text);
DROP FUNCTION public.texteq(text, text);
DROP USER MAPPING FOR CURRENT_USER SERVER regress_seccat_srv;
\c - :regress_superuser
REVOKE CREATE ON SCHEMA public FROM regress_seccat_owner;
DROP SERVER regress_seccat_srv;
DROP ROLE regress_seccat_owner;
DROP ROLE regress_seccat_other;
