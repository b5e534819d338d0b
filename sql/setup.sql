--
-- setup: the extension, a server and a user mapping used by every test.
-- The MongoDB under test comes from the environment (test/env exports
-- MONGO_URI, MONGO_USER, MONGO_PASSWORD); test/fixtures/load_regress.py has
-- loaded database idxtable_regress.
--
CREATE EXTENSION idxtable_fdw;
\getenv mongo_uri MONGO_URI
\getenv mongo_user MONGO_USER
\getenv mongo_password MONGO_PASSWORD
SELECT coalesce(:'mongo_user', '') <> '' AS have_user \gset
CREATE SERVER mongo FOREIGN DATA WRAPPER idxtable_fdw
  OPTIONS (uri :'mongo_uri', database 'idxtable_regress');
\if :have_user
CREATE USER MAPPING FOR CURRENT_USER SERVER mongo
  OPTIONS (username :'mongo_user', password :'mongo_password');
\else
CREATE USER MAPPING FOR CURRENT_USER SERVER mongo;
\endif
SELECT srvname, srvoptions[2] FROM pg_foreign_server;
-- the same MongoDB as a server without change streams for us: no applier
-- follows it, so the tests that change facts directly in MongoDB (writes,
-- verify, build, security_writes) find that drift with verify_index
-- rather than racing an applier that repairs it
CREATE SERVER mongo_nostream FOREIGN DATA WRAPPER idxtable_fdw
  OPTIONS (uri :'mongo_uri', database 'idxtable_regress',
           change_streams 'off');
\if :have_user
CREATE USER MAPPING FOR CURRENT_USER SERVER mongo_nostream
  OPTIONS (username :'mongo_user', password :'mongo_password');
\else
CREATE USER MAPPING FOR CURRENT_USER SERVER mongo_nostream;
\endif
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
