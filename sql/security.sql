--
-- security: postgres_fdw's trust rules.  A non-superuser authenticates
-- with a password from its user mapping (unless a superuser says
-- otherwise), cannot make the backend open local files or sockets, and
-- cannot put secrets where every role reads them; a foreign table read or
-- written through a view uses the view owner's user mapping.  Needs a
-- MongoDB that requires authentication (the test server does).
--
\getenv mongo_uri MONGO_URI
\getenv mongo_user MONGO_USER
\getenv mongo_password MONGO_PASSWORD
CREATE ROLE regress_sec_owner;
CREATE ROLE regress_sec_reader;
GRANT USAGE ON FOREIGN DATA WRAPPER idxtable_fdw TO regress_sec_owner;
CREATE SCHEMA regress_sec AUTHORIZATION regress_sec_owner;
GRANT USAGE ON SCHEMA regress_sec TO regress_sec_reader;

-- 1. password_required
SET ROLE regress_sec_owner;
CREATE SERVER sec_srv FOREIGN DATA WRAPPER idxtable_fdw
  OPTIONS (uri :'mongo_uri', database 'idxtable_regress',
           server_selection_timeout_ms '2000');
-- a non-superuser's mapping needs a username and a password ...
SELECT show_error('CREATE USER MAPPING FOR CURRENT_USER SERVER sec_srv');
SELECT show_error(format('CREATE USER MAPPING FOR CURRENT_USER SERVER sec_srv OPTIONS (username %L)', :'mongo_user'));
SELECT show_error(format('CREATE USER MAPPING FOR CURRENT_USER SERVER sec_srv OPTIONS (username %L, password %L)', :'mongo_user', ''));
-- ... and only a superuser may waive that
SELECT show_error('CREATE USER MAPPING FOR CURRENT_USER SERVER sec_srv OPTIONS (password_required ''false'')');
SELECT show_error('CREATE USER MAPPING FOR CURRENT_USER SERVER sec_srv OPTIONS (password_required ''maybe'')');
-- a wrong password: class 08, and no message shows it
CREATE USER MAPPING FOR CURRENT_USER SERVER sec_srv
  OPTIONS (username :'mongo_user', password 'wrong-secret-4711', password_required 'true');
CREATE FOREIGN TABLE regress_sec.numbers (id int OPTIONS (field '_id'))
  SERVER sec_srv OPTIONS (collection 'numbers');
SELECT split_part(show_error('SELECT count(*) FROM regress_sec.numbers'), E'\n', 1) AS error,
       strpos(show_error('SELECT count(*) FROM regress_sec.numbers'), 'wrong-secret-4711') AS shows_password;
ALTER USER MAPPING FOR CURRENT_USER SERVER sec_srv OPTIONS (SET password :'mongo_password');
SELECT count(*) FROM regress_sec.numbers;
-- the password cannot be dropped, nor the requirement waived, by its user
SELECT show_error('ALTER USER MAPPING FOR CURRENT_USER SERVER sec_srv OPTIONS (DROP password)');
SELECT show_error('ALTER USER MAPPING FOR CURRENT_USER SERVER sec_srv OPTIONS (SET password_required ''false'')');
RESET ROLE;
-- a mapping a superuser made without a password is refused at connect time
ALTER USER MAPPING FOR regress_sec_owner SERVER sec_srv OPTIONS (DROP password);
SET ROLE regress_sec_owner;
SELECT show_error('SELECT count(*) FROM regress_sec.numbers');
RESET ROLE;
-- with password_required 'false' (superuser only) the FDW lets it through:
-- MongoDB itself now refuses the wrong credentials
ALTER USER MAPPING FOR regress_sec_owner SERVER sec_srv
  OPTIONS (SET password_required 'false', ADD password 'wrong-secret-4711');
SET ROLE regress_sec_owner;
SELECT split_part(show_error('SELECT count(*) FROM regress_sec.numbers'), E'\n', 1) AS error;
RESET ROLE;
ALTER USER MAPPING FOR regress_sec_owner SERVER sec_srv
  OPTIONS (SET password :'mongo_password');
SET ROLE regress_sec_owner;
SELECT count(*) FROM regress_sec.numbers;
-- a superuser is not bound by it
RESET ROLE;
CREATE USER MAPPING FOR CURRENT_USER SERVER sec_srv
  OPTIONS (username :'mongo_user', password :'mongo_password');
SELECT count(*) FROM regress_sec.numbers;
DROP USER MAPPING FOR CURRENT_USER SERVER sec_srv;
ALTER USER MAPPING FOR regress_sec_owner SERVER sec_srv
  OPTIONS (DROP password_required);
-- a client a superuser opened through a PUBLIC mapping without a password
-- is not handed to a non-superuser in the same session
CREATE SERVER sec_pub FOREIGN DATA WRAPPER idxtable_fdw
  OPTIONS (uri :'mongo_uri', database 'idxtable_regress');
CREATE USER MAPPING FOR PUBLIC SERVER sec_pub;
CREATE FOREIGN TABLE regress_sec.pub_numbers (id int OPTIONS (field '_id'))
  SERVER sec_pub OPTIONS (collection 'numbers');
GRANT SELECT ON regress_sec.pub_numbers TO regress_sec_owner;
SELECT split_part(show_error('SELECT count(*) FROM regress_sec.pub_numbers'), E'\n', 1) AS error;
SET ROLE regress_sec_owner;
SELECT show_error('SELECT count(*) FROM regress_sec.pub_numbers');
RESET ROLE;
DROP SERVER sec_pub CASCADE;
SET ROLE regress_sec_owner;
-- an authentication mechanism without a password is refused for a
-- non-superuser, even on the server its owner made
CREATE SERVER sec_x509 FOREIGN DATA WRAPPER idxtable_fdw
  OPTIONS (uri 'mongodb://127.0.0.1:1/?authMechanism=MONGODB-X509', database 'idxtable_regress');
CREATE USER MAPPING FOR CURRENT_USER SERVER sec_x509
  OPTIONS (username 'CN=client', password 'unused');
CREATE FOREIGN TABLE regress_sec.x509 (id int OPTIONS (field '_id'))
  SERVER sec_x509 OPTIONS (collection 'numbers');
SELECT show_error('SELECT count(*) FROM regress_sec.x509');
DROP SERVER sec_x509 CASCADE;

-- 2. URI options that open local files or sockets: superusers only
SELECT show_error('CREATE SERVER sec_f FOREIGN DATA WRAPPER idxtable_fdw OPTIONS (uri ''mongodb://127.0.0.1:1/?tlsCertificateKeyFile=/etc/ssl/private/server.pem'')');
SELECT show_error('CREATE SERVER sec_f FOREIGN DATA WRAPPER idxtable_fdw OPTIONS (uri ''mongodb://127.0.0.1:1/?tls=true&tlsCAFile=/etc/ssl/certs/ca.pem'')');
SELECT show_error('CREATE SERVER sec_f FOREIGN DATA WRAPPER idxtable_fdw OPTIONS (uri ''mongodb://127.0.0.1:1/?sslClientCertificateKeyFile=/k.pem'')');
SELECT show_error('CREATE SERVER sec_f FOREIGN DATA WRAPPER idxtable_fdw OPTIONS (uri ''mongodb://%2Ftmp%2Fmongodb-27017.sock/'')');
-- a superuser's server with a file option serves a non-superuser (here
-- with TLS off, so that the file is not read) ...
RESET ROLE;
SELECT :'mongo_uri' || CASE WHEN strpos(:'mongo_uri', '?') > 0 THEN '&'
                            WHEN right(:'mongo_uri', 1) = '/' THEN '?'
                            ELSE '/?' END
       || 'tls=false&tlsCAFile=/nonexistent/ca.pem' AS files_uri \gset
CREATE SERVER sec_files FOREIGN DATA WRAPPER idxtable_fdw
  OPTIONS (uri :'files_uri', database 'idxtable_regress');
GRANT USAGE ON FOREIGN SERVER sec_files TO regress_sec_owner;
SET ROLE regress_sec_owner;
CREATE USER MAPPING FOR CURRENT_USER SERVER sec_files
  OPTIONS (username :'mongo_user', password :'mongo_password');
CREATE FOREIGN TABLE regress_sec.files (id int OPTIONS (field '_id'))
  SERVER sec_files OPTIONS (collection 'numbers');
SELECT count(*) FROM regress_sec.files;
-- ... but not once a non-superuser owns it, who cannot alter it either
RESET ROLE;
ALTER SERVER sec_files OWNER TO regress_sec_owner;
SET ROLE regress_sec_owner;
SELECT show_error('SELECT count(*) FROM regress_sec.files');
SELECT show_error('ALTER SERVER sec_files OPTIONS (ADD fetch_size ''10'')');
RESET ROLE;
DROP SERVER sec_files CASCADE;

-- 3. no secrets in a server's uri, for anyone; the user mapping takes them
SELECT show_error('CREATE SERVER sec_s FOREIGN DATA WRAPPER idxtable_fdw OPTIONS (uri ''mongodb://someone:s3cret-pw@127.0.0.1:1/'')');
SELECT show_error('CREATE SERVER sec_s FOREIGN DATA WRAPPER idxtable_fdw OPTIONS (uri ''mongodb://127.0.0.1:1/?tlsCertificateKeyFilePassword=s3cret-pw'')');
SELECT show_error('CREATE SERVER sec_s FOREIGN DATA WRAPPER idxtable_fdw OPTIONS (uri ''mongodb://127.0.0.1:1/?sslClientCertificateKeyPassword=s3cret-pw'')');
SELECT show_error('CREATE SERVER sec_s FOREIGN DATA WRAPPER idxtable_fdw OPTIONS (uri ''mongodb://127.0.0.1:1/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:s3cret-pw'')');
SELECT show_error('CREATE SERVER sec_s FOREIGN DATA WRAPPER idxtable_fdw OPTIONS (uri ''mongodb://127.0.0.1:1/?authMechanism=MONGODB-AWS&authMechanismProperties=aws_session_token:s3cret-pw'')');
SET ROLE regress_sec_owner;
ALTER USER MAPPING FOR CURRENT_USER SERVER sec_srv
  OPTIONS (ADD tls_certificate_key_file_password 's3cret-pw',
           ADD aws_session_token 's3cret-token');
SELECT show_error('ALTER USER MAPPING FOR CURRENT_USER SERVER sec_srv OPTIONS (SET aws_session_token '''')');
-- (neither is used without a client key or MONGODB-AWS)
SELECT count(*) FROM regress_sec.numbers;
-- another role does not see them
SET ROLE regress_sec_reader;
SELECT usename, umoptions FROM pg_user_mappings WHERE srvname = 'sec_srv';

-- 4. views: the view owner's user mapping, for reads and writes
SET ROLE regress_sec_owner;
CREATE FOREIGN TABLE regress_sec.rows (_id text, k text, v int)
  SERVER sec_srv OPTIONS (database 'idxtable_security', collection 'rows');
DELETE FROM regress_sec.rows;
SELECT idxtable.create_index('regress_sec.rows', '{k}', include => '{v}',
                             name => 'regress_sec_rows_k');
INSERT INTO regress_sec.rows VALUES ('1', 'a', 1), ('2', 'b', 2);
CREATE VIEW regress_sec.v_numbers AS SELECT id FROM regress_sec.numbers;
CREATE VIEW regress_sec.v_rows AS SELECT * FROM regress_sec.rows;
GRANT SELECT ON regress_sec.v_numbers, regress_sec.numbers TO regress_sec_reader;
GRANT SELECT, INSERT, UPDATE, DELETE ON regress_sec.v_rows TO regress_sec_reader;
-- the reader has no user mapping: reading the table itself fails ...
SET ROLE regress_sec_reader;
SELECT show_error('SELECT count(*) FROM regress_sec.numbers');
-- ... reading through the view uses its owner's
SELECT count(*) FROM regress_sec.v_numbers;
-- planning (the index covers this query) and executing, as the owner
EXPLAIN (COSTS OFF) SELECT k, v FROM regress_sec.v_rows WHERE k = 'a';
SELECT k, v FROM regress_sec.v_rows WHERE k = 'a';
-- writes through the view, with index upkeep, as the owner
INSERT INTO regress_sec.v_rows VALUES ('3', 'c', 3);
UPDATE regress_sec.v_rows SET v = 20 WHERE _id = '2';
DELETE FROM regress_sec.v_rows WHERE _id = '1';
SELECT * FROM regress_sec.v_rows WHERE k = 'c';
SET ROLE regress_sec_owner;
SELECT * FROM regress_sec.rows ORDER BY _id;
SELECT * FROM idxtable.verify_index('regress_sec_rows_k');
-- a new session of the reader, in which no index's ownership marker has
-- been checked yet: planning reads the markers as the view's owner too
RESET ROLE;
SELECT current_user AS regress_sec_su \gset
ALTER ROLE regress_sec_reader LOGIN;
\c - regress_sec_reader
EXPLAIN (COSTS OFF) SELECT k, v FROM regress_sec.v_rows WHERE k = 'c';
SELECT k, v FROM regress_sec.v_rows WHERE k = 'c';
\c - :regress_sec_su
SET ROLE regress_sec_owner;
-- a row routed to a foreign partition: the partitioned table's entry
-- decides (the partition has none of its own)
CREATE TABLE regress_sec.parent (_id text, k text, v int) PARTITION BY LIST (k);
CREATE FOREIGN TABLE regress_sec.part_d PARTITION OF regress_sec.parent
  FOR VALUES IN ('d') SERVER sec_srv
  OPTIONS (database 'idxtable_security', collection 'parts');
DELETE FROM regress_sec.part_d;
CREATE VIEW regress_sec.v_parent AS SELECT * FROM regress_sec.parent;
GRANT SELECT, INSERT ON regress_sec.v_parent TO regress_sec_reader;
SET ROLE regress_sec_reader;
INSERT INTO regress_sec.v_parent VALUES ('4', 'd', 4);
SELECT * FROM regress_sec.v_parent;
-- ANALYZE connects as the table's owner, whoever runs it (this superuser
-- has no user mapping for sec_srv)
RESET ROLE;
ANALYZE regress_sec.rows;

-- clean up
SET ROLE regress_sec_owner;
DELETE FROM regress_sec.rows;
DELETE FROM regress_sec.part_d;
SELECT idxtable.drop_index('regress_sec_rows_k');
RESET ROLE;
DROP SCHEMA regress_sec CASCADE;
DROP SERVER sec_srv CASCADE;
REVOKE USAGE ON FOREIGN DATA WRAPPER idxtable_fdw FROM regress_sec_owner;
DROP ROLE regress_sec_owner;
DROP ROLE regress_sec_reader;
