--
-- prepared: parameters of prepared statements are pushed down with their
-- values at execution, in custom and generic plans
--
SET plan_cache_mode = force_generic_plan;
PREPARE by_id(int) AS SELECT id, label FROM numbers WHERE id = $1;
EXPLAIN (VERBOSE, COSTS OFF) EXECUTE by_id(5);
EXECUTE by_id(5);
EXECUTE by_id(2999);
EXECUTE by_id(NULL);
EXPLAIN (VERBOSE, COSTS OFF, ANALYZE, BUFFERS OFF, TIMING OFF, SUMMARY OFF) EXECUTE by_id(17);
PREPARE range(int, int) AS SELECT count(*) FROM numbers WHERE v >= $1 AND v < $2;
EXECUTE range(10, 20);
SELECT count(*) FROM numbers WHERE v >= 10 AND v < 20;
PREPARE in_list(int[]) AS SELECT id FROM numbers WHERE id = ANY($1) ORDER BY id;
EXECUTE in_list(ARRAY[3, 1, 2, NULL]);
EXECUTE in_list(NULL);
PREPARE txt(text) AS SELECT k FROM objids WHERE id = $1;
EXECUTE txt('650000000000000000000004');
PREPARE ts(timestamp) AS SELECT count(*) FROM people WHERE joined < $1;
EXECUTE ts('2020-03-01');
-- a value BSON cannot hold exactly still gives PostgreSQL's answer
EXECUTE ts('2020-03-01 00:00:00.0001');
RESET plan_cache_mode;
-- parameters from an outer query (nested loop with rescans)
SELECT n.id, (SELECT count(*) FROM numbers m WHERE m.id = n.v) AS found
  FROM numbers n WHERE n.id IN (1, 96, 97, 98) ORDER BY n.id;
