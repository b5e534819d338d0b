--
-- auth: credentials come from the user mapping; failures are class 08 and
-- never show the password.  Only meaningful when the MongoDB under test
-- requires authentication (the test server does).
--
\getenv mongo_uri MONGO_URI
\getenv mongo_user MONGO_USER
SELECT coalesce(:'mongo_user', '') <> '' AS have_user \gset
\if :have_user
CREATE SERVER authsrv FOREIGN DATA WRAPPER idxtable_fdw
  OPTIONS (uri :'mongo_uri', database 'idxtable_regress', server_selection_timeout_ms '2000');
CREATE USER MAPPING FOR CURRENT_USER SERVER authsrv
  OPTIONS (username :'mongo_user', password 'wrong-password-123');
CREATE FOREIGN TABLE auth_numbers (id int OPTIONS (field '_id')) SERVER authsrv
  OPTIONS (collection 'numbers');
SELECT show_error('SELECT count(*) FROM auth_numbers');
-- the right password, given by ALTER USER MAPPING, takes effect at once
\getenv mongo_password MONGO_PASSWORD
ALTER USER MAPPING FOR CURRENT_USER SERVER authsrv OPTIONS (SET password :'mongo_password');
SELECT count(*) FROM auth_numbers;
-- no credentials at all
ALTER USER MAPPING FOR CURRENT_USER SERVER authsrv OPTIONS (DROP username, DROP password);
SELECT show_error('SELECT count(*) FROM auth_numbers');
DROP SERVER authsrv CASCADE;
\endif
