--
-- stream: what the stream under libmongoc refuses before connecting.
-- (Malformed replies, silent servers, cancel and statement_timeout need a
-- hostile server: test/hostile.py.)
--
-- wire compression: libmongoc 1.23 decompresses any compressed reply
-- without checks, so the uri may not ask for it, when the server is
-- created or altered (and the stream refuses it again when it connects)
SELECT show_error($$CREATE SERVER compressed FOREIGN DATA WRAPPER idxtable_fdw
  OPTIONS (uri 'mongodb://127.0.0.1:1/?compressors=zlib', database 'x')$$);
CREATE SERVER compressed FOREIGN DATA WRAPPER idxtable_fdw
  OPTIONS (uri 'mongodb://127.0.0.1:1/', database 'x');
SELECT show_error($$ALTER SERVER compressed
  OPTIONS (SET uri 'mongodb://127.0.0.1:1/?compressors=snappy,zlib')$$);
CREATE USER MAPPING FOR CURRENT_USER SERVER compressed;
CREATE FOREIGN TABLE compressed_t (id int OPTIONS (field '_id'))
  SERVER compressed;
-- without compressors the server is only unreachable
SELECT show_error('SELECT * FROM compressed_t');
DROP SERVER compressed CASCADE;
