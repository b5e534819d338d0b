--
-- setup: the extension, a server and a user mapping used by every test.
-- The MongoDB under test comes from the environment (test/env exports
-- MONGO_URI, MONGO_USER, MONGO_PASSWORD); make installcheck has loaded
-- database idxtable_regress first (test/fixtures/load_regress.py).
--
CREATE EXTENSION idxtable_fdw;
\set server mongo
\set mongo_database idxtable_regress
\i test/fixtures/server.sql
SELECT srvname, srvoptions[2] FROM pg_foreign_server;
-- the same MongoDB as a server without change streams for us: no applier
-- follows it, so the tests that change facts directly in MongoDB (writes,
-- verify, build, security_writes) find that drift with verify_index
-- rather than racing an applier that repairs it
\set server mongo_nostream
\set server_options ', change_streams \'off\''
\i test/fixtures/server.sql
-- run a statement and show its SQLSTATE, message and detail (no source
-- locations, which would tie the expected output to line numbers), in the
-- words of PostgreSQL 15 and libmongoc 1.23 where later versions reword
-- them: PostgreSQL 17 names the server in "user mapping not found" and
-- the unit in a setting's range; libmongoc 1.30 ends a server selection
-- error with the topology type
CREATE FUNCTION show_error(stmt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  state text;
  msg text;
  detail text;
BEGIN
  EXECUTE stmt;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
                          detail = PG_EXCEPTION_DETAIL;
  msg := regexp_replace(msg, '^(user mapping not found for) user ("[^"]*"), server "[^"]*"$', '\1 \2');
  msg := regexp_replace(msg, '\((-?[0-9]+) ms \.\. (-?[0-9]+) ms\)$', '(\1 .. \2)');
  detail := regexp_replace(detail, '\. Topology type: [A-Za-z]+$', '');
  RETURN state || ': ' || msg || coalesce(E'\n' || nullif(detail, ''), '');
END $$;
