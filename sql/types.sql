--
-- types: every supported type, BSON -> PostgreSQL (scans) and
-- PostgreSQL -> BSON (constants in pushed-down filters)
--
SET timezone = 'UTC';
CREATE FOREIGN TABLE types (
  id int OPTIONS (field '_id'),
  t text, i2 smallint, i4 integer, i8 bigint, f4 real, f8 double precision,
  n numeric, b boolean, ts timestamp, tstz timestamptz, d date, u uuid,
  by bytea, j jsonb, js json OPTIONS (field 'j'), arr_i int[], arr_t text[],
  oid text, town text OPTIONS (field 'nested.town'),
  zip varchar(10) OPTIONS (field 'nested.zip.code'),
  missing text
) SERVER mongo OPTIONS (collection 'types');
\x on
SELECT * FROM types ORDER BY id;
\x off
-- decimal128 goes to numeric without passing through double
SELECT id, n, n * 10 AS n10 FROM types WHERE n IS NOT NULL ORDER BY id;
-- constants of each type become BSON values of the matching type
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM types WHERE t = 'hello';
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM types WHERE i2 = 12::smallint;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM types WHERE i8 = 1234567890123;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM types WHERE f8 = 3.25::float8;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM types WHERE b = false;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM types WHERE ts = '2020-01-02 03:04:05.006';
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM types WHERE tstz = '2021-06-07 08:09:10+00';
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM types WHERE d = '2022-03-04';
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM types WHERE u = '6f1b7c9a-3e0f-4b8e-9a57-1c2d3e4f5a6b';
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM types WHERE by = '\x0001feff';
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM types WHERE oid = '5f43a1b2c3d4e5f607182930';
-- ... and they select the same rows PostgreSQL would
SELECT id FROM types WHERE t = 'hello';
SELECT id FROM types WHERE i2 = 12::smallint;
SELECT id FROM types WHERE i4 = 7;
SELECT id FROM types WHERE i8 = 5;
SELECT id FROM types WHERE f8 = 42;
SELECT id FROM types WHERE b = false;
SELECT id FROM types WHERE ts = '2020-01-02 03:04:05.006';
SELECT id FROM types WHERE tstz < '1970-01-01 00:00:00+00';
SELECT id FROM types WHERE d = '2022-03-04';
SELECT id FROM types WHERE u = '6f1b7c9a-3e0f-4b8e-9a57-1c2d3e4f5a6b';
SELECT id FROM types WHERE by = '\x0001feff';
SELECT id FROM types WHERE oid = '5f43a1b2c3d4e5f607182930';
SELECT id FROM types WHERE zip = '98052';
-- values BSON cannot hold exactly are compared locally
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM types WHERE ts = '2020-01-02 03:04:05.0061';
SELECT id FROM types WHERE ts = '2020-01-02 03:04:05.0061';
-- NaN is pushed: MongoDB's $eq, like PostgreSQL, finds NaN equal to NaN
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM types WHERE f8 = 'NaN';
SELECT id FROM types WHERE f8 = 'NaN';
-- numeric, json and arrays are compared locally
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM types WHERE n = 1.1 AND arr_i = '{1,2,3}';
SELECT id FROM types WHERE n = 1.1;
SELECT id FROM types WHERE arr_i = '{1,2,3}';
SELECT id FROM types WHERE j @> '{"a": 1}';
