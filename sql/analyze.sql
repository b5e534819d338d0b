--
-- analyze: sampled statistics give the planner row counts
--
SELECT reltuples FROM pg_class WHERE relname = 'numbers';
ANALYZE numbers;
SELECT reltuples FROM pg_class WHERE relname = 'numbers';
SELECT attname, null_frac, n_distinct > 0 OR n_distinct < 0 AS has_ndistinct
  FROM pg_stats WHERE tablename = 'numbers' ORDER BY attname;
ANALYZE people;
SELECT attname, null_frac FROM pg_stats WHERE tablename = 'people' AND attname IN ('age', 'town') ORDER BY 1;
-- estimates now come from the statistics
EXPLAIN SELECT * FROM numbers WHERE v = 3;
-- an empty collection
CREATE FOREIGN TABLE empty_coll (id int OPTIONS (field '_id')) SERVER mongo OPTIONS (collection 'empty');
ANALYZE empty_coll;
SELECT reltuples FROM pg_class WHERE relname = 'empty_coll';
