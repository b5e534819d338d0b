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
-- locations, which would tie the expected output to line numbers)
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
  RETURN state || ': ' || msg || coalesce(E'\n' || nullif(detail, ''), '');
END $$;
