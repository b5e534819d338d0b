--
-- security_writes: what the write paths refuse, before anything of the
-- statement is written: JSON keys MongoDB cannot store, documents over
-- MongoDB's 16 MiB, column names that are no field path.  Also: uuid is
-- binary subtype 4 only, verify/repair count facts that do not convert,
-- and _id values and key values in error details only for roles that may
-- read them.  What MongoDB holds is checked with test/fixtures/documents.py.
--
\! /usr/bin/python3 test/fixtures/documents.py drop
CREATE SCHEMA sw;
SET search_path = sw, public;
CREATE FOREIGN TABLE ek (_id int, name text, j jsonb, js json)
  SERVER mongo OPTIONS (database 'idxtable_writes', collection 'sw_ek');
CREATE FOREIGN TABLE ek_ord (_id int, name text, j jsonb, js json)
  SERVER mongo OPTIONS (database 'idxtable_writes', collection 'sw_ek_ord',
                        consistency 'ordered');
SELECT idxtable.create_index('ek', '{name}', include => '{j}', name => 'ek_name');
SELECT idxtable.create_index('ek_ord', '{name}', include => '{j}', name => 'ek_ord_name');

-- JSON keys: empty, starting with "$", containing "." are 22023 naming the
-- column and the key, at any depth, in both modes; nothing remains.  (In
-- transaction mode an error caught after a foreign write would doom the
-- MongoDB transaction: show_error working shows nothing was written.)
SELECT show_error($$INSERT INTO ek VALUES (1, 'one', '{"a": 1}'), (2, 'two', '{"": "x"}'), (3, 'three', '{"b": {"": 2}}')$$);
SELECT show_error($$INSERT INTO ek_ord VALUES (1, 'one', '{"a": 1}'), (2, 'two', '{"": "x"}'), (3, 'three', '{"b": {"": 2}}')$$);
SELECT show_error($$INSERT INTO ek VALUES (4, 'four', '{"a": [1, {"$gt": 0}]}')$$);
SELECT show_error($$INSERT INTO ek_ord VALUES (4, 'four', NULL, '{"a": {"x.y": 1}}')$$);
INSERT INTO ek VALUES (5, 'five', '{"a": 1}') RETURNING *;
SELECT show_error($$INSERT INTO ek VALUES (6, 'six', '{"$where": "1"}') RETURNING *$$);
SELECT (SELECT count(*) FROM ek) AS ek, (SELECT count(*) FROM ek_ord) AS ek_ord;
\! /usr/bin/python3 test/fixtures/documents.py show sw_ek_ord
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.sw_ek_ord.ek_ord_name
-- keys that are fine: "$" and "." inside, values starting with "$"
INSERT INTO ek VALUES (7, 'seven', '{"a$": "$x", "b": {"c": ["$"]}}');
INSERT INTO ek_ord VALUES (1, 'one', '{"a": 1}'), (2, 'two', '{"b": 2}');
-- UPDATE: row by row (RETURNING), batched (transaction mode), ordered
SELECT show_error($$UPDATE ek SET j = '{"": 1}' WHERE _id = 5 RETURNING *$$);
SELECT show_error($$UPDATE ek SET j = jsonb_build_object('k.' || _id, 1)$$);
SELECT show_error($$UPDATE ek_ord SET j = CASE WHEN _id = 2 THEN '{"$set": 1}'::jsonb ELSE '{"ok": 1}' END$$);
-- a failing row after batches already written: nothing of the statement
-- remains (transaction mode: MongoDB aborts; ordered mode: undone)
ALTER FOREIGN TABLE ek OPTIONS (ADD batch_size '2');
ALTER FOREIGN TABLE ek_ord OPTIONS (ADD batch_size '2');
INSERT INTO ek VALUES (20, 'a', NULL), (21, 'b', NULL), (22, 'c', '{"": 1}');
INSERT INTO ek_ord VALUES (20, 'a', NULL), (21, 'b', NULL), (22, 'c', '{"": 1}');
INSERT INTO ek VALUES (8, 'eight', '{"x": 8}');
UPDATE ek SET j = CASE WHEN _id = 8 THEN '{"": 1}'::jsonb ELSE '{"ok": 1}' END;
DELETE FROM ek WHERE _id = 8;
ALTER FOREIGN TABLE ek OPTIONS (DROP batch_size);
ALTER FOREIGN TABLE ek_ord OPTIONS (DROP batch_size);
SELECT * FROM ek ORDER BY _id;
SELECT * FROM ek_ord ORDER BY _id;
\! /usr/bin/python3 test/fixtures/documents.py show sw_ek_ord
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.sw_ek_ord.ek_ord_name
SELECT * FROM idxtable.verify_index('ek_name');
SELECT * FROM idxtable.verify_index('ek_ord_name');
-- COPY goes the same way
-- (no CONTEXT: PostgreSQL 17 no longer names the line of a batch that fails)
\set SHOW_CONTEXT never
COPY ek FROM STDIN;
8	eight	{"x": 1}	\N
9	nine	{"": 1}	\N
\.
\set SHOW_CONTEXT errors
SELECT count(*) FROM ek;

-- too large: 54000 naming the table, before anything is written
SELECT show_error($$INSERT INTO ek VALUES (10, 'ten', NULL), (11, repeat('x', 17 * 1024 * 1024), NULL)$$);
SELECT show_error($$INSERT INTO ek_ord VALUES (10, 'ten', NULL), (11, NULL, jsonb_build_object('s', repeat('x', 17 * 1024 * 1024)))$$);
SELECT show_error($$UPDATE ek SET name = repeat('y', 17 * 1024 * 1024) WHERE _id = 5$$);
SELECT show_error($$UPDATE ek_ord SET name = CASE WHEN _id = 2 THEN repeat('y', 17 * 1024 * 1024) ELSE 'uno' END$$);
SELECT _id, name FROM ek ORDER BY _id;
SELECT _id, name FROM ek_ord ORDER BY _id;
SELECT * FROM idxtable.verify_index('ek_name');
SELECT * FROM idxtable.verify_index('ek_ord_name');
-- just under the limit is fine
INSERT INTO ek VALUES (12, 'twelve', NULL, NULL);
UPDATE ek SET js = json_build_object('s', repeat('z', 16 * 1024 * 1024 - 1000)) WHERE _id = 12;
SELECT _id, length(js::text) FROM ek WHERE _id = 12;
DELETE FROM ek WHERE _id = 12;

-- column names as field paths: refused when the table is first used
CREATE FOREIGN TABLE dw ("$where" text, _id int)
  SERVER mongo OPTIONS (database 'idxtable_writes', collection 'sw_ek');
SELECT show_error('SELECT * FROM dw');
SELECT show_error($$INSERT INTO dw VALUES ('1', 100)$$);
ALTER FOREIGN TABLE dw RENAME COLUMN "$where" TO "a..b";
SELECT show_error('SELECT * FROM dw');
ALTER FOREIGN TABLE dw RENAME COLUMN "a..b" TO ".a";
SELECT show_error('SELECT * FROM dw');
ALTER FOREIGN TABLE dw RENAME COLUMN ".a" TO "a.$b";
SELECT show_error('SELECT * FROM dw');
-- the field option is checked when it is set
SELECT show_error($$ALTER FOREIGN TABLE dw ALTER COLUMN "a.$b" OPTIONS (ADD field '$where')$$);
SELECT show_error($$ALTER FOREIGN TABLE dw ALTER COLUMN "a.$b" OPTIONS (ADD field 'a.')$$);
-- a valid field option makes any column name usable; dotted names are paths
ALTER FOREIGN TABLE dw ALTER COLUMN "a.$b" OPTIONS (ADD field 'name');
SELECT * FROM dw ORDER BY _id;
ALTER FOREIGN TABLE dw RENAME COLUMN "a.$b" TO "j.a$";
ALTER FOREIGN TABLE dw ALTER COLUMN "j.a$" OPTIONS (DROP field);
SELECT * FROM dw ORDER BY _id;
SELECT count(*) FROM ek;
DROP FOREIGN TABLE dw;

-- uuid is binary subtype 4; subtype 3 is a wrong type like any other
CREATE FOREIGN TABLE uu (_id int, u uuid)
  SERVER mongo OPTIONS (database 'idxtable_writes', collection 'sw_uu');
INSERT INTO uu VALUES (1, '6f1b7c9a-3e0f-4b8e-9a57-1c2d3e4f5a6b');
\! /usr/bin/python3 test/fixtures/documents.py insert sw_uu '{"_id": 2, "u": {"$binary": {"base64": "bxt8mj4PS46aVxwtPk9aaw==", "subType": "03"}}}'
\! /usr/bin/python3 test/fixtures/documents.py show sw_uu
SELECT * FROM uu WHERE _id = 1;
SELECT show_error('SELECT * FROM uu WHERE _id = 2');
SELECT show_error('SELECT * FROM uu ORDER BY _id');
-- pushed down, a uuid is compared with subtype 4 only: the subtype 3
-- value does not match, and a range that includes it reads it and fails
SELECT * FROM uu WHERE u = '6f1b7c9a-3e0f-4b8e-9a57-1c2d3e4f5a6b';
SELECT show_error($$SELECT * FROM uu WHERE u <= '6f1b7c9a-3e0f-4b8e-9a57-1c2d3e4f5a6b'$$);
-- create_index stops at a fact that does not convert, naming it
DELETE FROM uu WHERE _id = 1;
SELECT show_error($$SELECT idxtable.create_index('uu', '{u}', name => 'uu_u')$$);

-- verify/repair over facts that do not convert: counted, the first named
-- (vf and vu are on server mongo_nostream, change_streams 'off': no
-- applier repairs the facts changed below behind the FDW's back)
CREATE FOREIGN TABLE vf (_id int, v int, w text)
  SERVER mongo_nostream OPTIONS (database 'idxtable_writes', collection 'sw_vf');
INSERT INTO vf SELECT i, i, 'w' || i FROM generate_series(1, 5) i;
SELECT idxtable.create_index('vf', '{v}', include => '{w}', name => 'vf_v');
-- two facts get values that no longer fit v, behind the FDW's back
\! /usr/bin/python3 test/fixtures/documents.py set sw_vf '{"_id": {"$in": [2, 4]}}' '{"v": "not a number"}'
SELECT show_error('SELECT * FROM vf');
SELECT * FROM idxtable.verify_index('vf_v');
SELECT * FROM idxtable.repair_index('vf_v');
-- the others were checked; the entries of 2 and 4 were left alone
\! /usr/bin/python3 test/fixtures/documents.py show idxtable.sw_vf.vf_v
\! /usr/bin/python3 test/fixtures/documents.py set sw_vf '{"_id": 2}' '{"v": 2}'
\! /usr/bin/python3 test/fixtures/documents.py set sw_vf '{"_id": 4}' '{"v": 40}'
SELECT * FROM idxtable.verify_index('vf_v');
SELECT * FROM idxtable.repair_index('vf_v');
SELECT * FROM idxtable.verify_index('vf_v');

-- _id in error details: only for a role that may read the _id column
CREATE ROLE regress_sw_user;
\set server mongo_nostream
\set mapping_role regress_sw_user
\i test/fixtures/user_mapping.sql
GRANT USAGE ON SCHEMA sw TO regress_sw_user;
GRANT SELECT (v), INSERT ON vf TO regress_sw_user;
\! /usr/bin/python3 test/fixtures/documents.py set sw_vf '{"_id": 3}' '{"v": "x"}'
SET ROLE regress_sw_user;
SELECT show_error('SELECT v FROM vf');
INSERT INTO vf VALUES (1, 1);
RESET ROLE;
GRANT SELECT (_id) ON vf TO regress_sw_user;
SET ROLE regress_sw_user;
SELECT show_error('SELECT v FROM vf');
INSERT INTO vf VALUES (1, 1);
RESET ROLE;
-- a unique index: the key is shown only with SELECT on its columns
CREATE FOREIGN TABLE vu (_id int, k text)
  SERVER mongo_nostream OPTIONS (database 'idxtable_writes', collection 'sw_vu');
SELECT idxtable.create_index('vu', '{k}', is_unique => true, name => 'vu_k');
INSERT INTO vu VALUES (1, 'secret');
GRANT SELECT (_id), INSERT ON vu TO regress_sw_user;
SET ROLE regress_sw_user;
INSERT INTO vu VALUES (2, 'secret');
RESET ROLE;
GRANT SELECT (k) ON vu TO regress_sw_user;
SET ROLE regress_sw_user;
INSERT INTO vu VALUES (2, 'secret');
RESET ROLE;
SELECT count(*) FROM vu;

DROP FOREIGN TABLE ek, ek_ord, uu, vf, vu;
DROP USER MAPPING FOR regress_sw_user SERVER mongo_nostream;
DROP SCHEMA sw;
DROP ROLE regress_sw_user;
RESET search_path;
\! /usr/bin/python3 test/fixtures/documents.py drop
