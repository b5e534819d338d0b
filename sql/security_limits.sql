--
-- security_limits: what one role's index tables cannot do to others.
-- Index tables of temporary foreign tables are refused (their definitions
-- would outlive the session); a definition whose table is gone can be
-- dropped by a superuser, and only by one; arguments that would be
-- misread are refused.  The per-role limit on index tables and the
-- appliers' bookkeeping are checked by test/security_limits.py.
--
CREATE SCHEMA sl;
SET search_path = sl, public;
CREATE ROLE regress_sl_user;
GRANT USAGE ON SCHEMA sl TO regress_sl_user;
GRANT CREATE ON SCHEMA sl TO regress_sl_user;
GRANT USAGE ON FOREIGN SERVER mongo TO regress_sl_user;

--
-- 1. temporary foreign tables get no index tables (create_index and its
-- concurrent variant), for their owner as for a superuser
--
SET ROLE regress_sl_user;
CREATE FOREIGN TABLE pg_temp.sl_tmp (_id text, k text)
  SERVER mongo OPTIONS (collection 'sl_tmp');
SELECT show_error($$SELECT idxtable.create_index('pg_temp.sl_tmp', '{k}')$$);
CALL idxtable.create_index_concurrently('pg_temp.sl_tmp', '{k}');
DROP FOREIGN TABLE pg_temp.sl_tmp;
RESET ROLE;
CREATE FOREIGN TABLE pg_temp.sl_tmp2 (_id text, k text)
  SERVER mongo OPTIONS (collection 'sl_tmp');
SELECT show_error($$SELECT idxtable.create_index('pg_temp.sl_tmp2', '{k}', name => 'sl_tmp2_k')$$);
SELECT count(*) FROM idxtable.index_defs WHERE name LIKE 'sl_tmp%';
DROP FOREIGN TABLE pg_temp.sl_tmp2;

--
-- 2. a definition whose table is gone (dropped while the event trigger
-- that deletes definitions was disabled, as the definitions of temporary
-- tables of earlier versions were left): only a superuser may drop it;
-- then the name is free, and a new index of that name takes the
-- collection over
--
CREATE FOREIGN TABLE sl_gone (_id text, k text)
  SERVER mongo OPTIONS (collection 'sl_gone');
INSERT INTO sl_gone VALUES ('1', 'a');
SELECT idxtable.create_index('sl_gone', '{k}', name => 'sl_gone_k');
ALTER EVENT TRIGGER idxtable_drop_table_indexes DISABLE;
DROP FOREIGN TABLE sl_gone;
ALTER EVENT TRIGGER idxtable_drop_table_indexes ENABLE;
SELECT name, tbl::oid NOT IN (SELECT oid FROM pg_class) AS table_gone
  FROM idxtable.index_defs WHERE name = 'sl_gone_k';
SET ROLE regress_sl_user;
SELECT regexp_replace(show_error($$SELECT idxtable.drop_index('sl_gone_k')$$),
                      'OID \d+', 'OID n');
RESET ROLE;
SELECT idxtable.drop_index('sl_gone_k');
SELECT count(*) FROM idxtable.index_defs WHERE name = 'sl_gone_k';
CREATE FOREIGN TABLE sl_back (_id text, k text)
  SERVER mongo OPTIONS (collection 'sl_gone');
SELECT idxtable.create_index('sl_back', '{k}', name => 'sl_gone_k');
SELECT * FROM idxtable.verify_index('sl_gone_k');
SELECT idxtable.drop_index('sl_gone_k');
-- an index that does not exist is still 42704
SELECT show_error($$SELECT idxtable.drop_index('sl_no_such_index')$$);

--
-- 3. keys and included columns are one-dimensional arrays of names
--
SELECT show_error($$SELECT idxtable.create_index('sl_back', '{{k},{_id}}')$$);
SELECT show_error($$SELECT idxtable.create_index('sl_back', '{k}', include => '{{_id}}')$$);
SELECT count(*) FROM idxtable.index_defs WHERE tbl = 'sl_back'::regclass;

--
-- 4. collation_version of an OID that names no collation: an error, as
-- pg_collation_actual_version gives
--
SELECT show_error($$SELECT idxtable.collation_version(0)$$);
SELECT show_error($$SELECT pg_collation_actual_version(0)$$);
SELECT idxtable.collation_version('"C"') IS NULL AS c_unversioned;

DROP FOREIGN TABLE sl_back;
DROP SCHEMA sl CASCADE;
REVOKE USAGE ON FOREIGN SERVER mongo FROM regress_sl_user;
DROP ROLE regress_sl_user;
