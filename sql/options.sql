--
-- options: validation of server, user mapping, table and column options
--
-- unknown options get a hint with the valid ones
CREATE SERVER bad1 FOREIGN DATA WRAPPER idxtable_fdw OPTIONS (url 'mongodb://localhost');
CREATE SERVER bad2 FOREIGN DATA WRAPPER idxtable_fdw OPTIONS (database 'x');
CREATE SERVER bad3 FOREIGN DATA WRAPPER idxtable_fdw OPTIONS (uri 'not a uri');
-- credentials never go into the server's URI (and are not echoed back)
CREATE SERVER bad4 FOREIGN DATA WRAPPER idxtable_fdw
  OPTIONS (uri 'mongodb://alice:s3cret@localhost:27017/');
CREATE SERVER bad5 FOREIGN DATA WRAPPER idxtable_fdw
  OPTIONS (uri 'mongodb://localhost', fetch_size '0');
CREATE SERVER bad6 FOREIGN DATA WRAPPER idxtable_fdw
  OPTIONS (uri 'mongodb://localhost', connect_timeout_ms 'soon');
CREATE SERVER bad7 FOREIGN DATA WRAPPER idxtable_fdw
  OPTIONS (uri 'mongodb://localhost', database 'a.b');
CREATE SERVER okserver FOREIGN DATA WRAPPER idxtable_fdw
  OPTIONS (uri 'mongodb://localhost:1/?replicaSet=rs0', connect_timeout_ms '500',
           socket_timeout_ms '1000', server_selection_timeout_ms '500', fetch_size '10');
ALTER SERVER okserver OPTIONS (DROP uri);
ALTER SERVER okserver OPTIONS (SET fetch_size '20');
-- user mapping options
CREATE USER MAPPING FOR public SERVER okserver OPTIONS (user 'x');
CREATE USER MAPPING FOR public SERVER okserver OPTIONS (username '');
CREATE USER MAPPING FOR public SERVER okserver OPTIONS (username 'x', password 'y', auth_source 'admin');
-- the password is not shown to users who may not see it
CREATE ROLE regress_idx_nobody;
SET ROLE regress_idx_nobody;
SELECT umoptions FROM pg_user_mappings WHERE srvname = 'okserver';
RESET ROLE;
DROP ROLE regress_idx_nobody;
-- table and column options
CREATE FOREIGN TABLE badtab (a int) SERVER okserver OPTIONS (collectio 'x');
CREATE FOREIGN TABLE badtab (a int) SERVER okserver OPTIONS (collection '');
CREATE FOREIGN TABLE badtab (a int OPTIONS (column 'x')) SERVER okserver;
CREATE FOREIGN TABLE badtab (a int OPTIONS (field 'a..b')) SERVER okserver;
CREATE FOREIGN TABLE badtab (a int OPTIONS (field '$where')) SERVER okserver;
CREATE FOREIGN TABLE badtab (a int OPTIONS (field '')) SERVER okserver;
CREATE FOREIGN TABLE goodtab (a int OPTIONS (field 'x.y'), b text)
  SERVER okserver OPTIONS (collection 'c', database 'd', fetch_size '5');
ALTER FOREIGN TABLE goodtab ALTER COLUMN b OPTIONS (ADD field 'b.$bad');
\d+ goodtab
DROP SERVER okserver CASCADE;
