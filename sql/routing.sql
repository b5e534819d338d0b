--
-- routing: the planner sends secondary-key predicates through index tables
-- (key-only: lookup, then facts by _id; covering: the entries alone) and
-- picks the plain scan where that is cheaper.  Every result is compared
-- with routing turned off.
--
CREATE FOREIGN TABLE customers (
  customer_id int OPTIONS (field '_id'), town text, last_name text,
  first_name text, email text
) SERVER mongo OPTIONS (collection 'customers');
CREATE FOREIGN TABLE films (
  film_id int OPTIONS (field '_id'), title text, year int, actors text[]
) SERVER mongo OPTIONS (collection 'films');
SELECT idxtable.create_index('customers', '{town,last_name}');
SELECT idxtable.create_index('customers', '{lower(email)}', is_unique => true);
SELECT idxtable.create_index('customers', '{last_name}', '{first_name,town}',
                             name => 'customers_last_name_covering');
SELECT idxtable.create_index('films', '{actors}');
-- ANALYZE refreshes the index tables' statistics from its sample
UPDATE idxtable.index_defs SET entries = NULL, distinct_keys = NULL;
ANALYZE customers;
ANALYZE films;
SELECT name, entries, distinct_keys FROM idxtable.index_defs
  WHERE name LIKE 'customers%' OR name LIKE 'films%' ORDER BY name;
-- composite key: equality on both keys, a lookup and one fetch
EXPLAIN (VERBOSE, COSTS OFF)
  SELECT * FROM customers WHERE town = 'Town06' AND last_name = 'Name045';
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT * FROM customers WHERE town = 'Town06' AND last_name = 'Name045';
-- prefix, IN list, and a range on the next key (only under COLLATE "C")
EXPLAIN (COSTS OFF) SELECT * FROM customers WHERE town = 'Town07';
EXPLAIN (COSTS OFF) SELECT * FROM customers WHERE town IN ('Town07', 'Town08');
EXPLAIN (COSTS OFF)
  SELECT * FROM customers WHERE town = 'Town07' AND last_name COLLATE "C" < 'Name010';
-- expression key: lower(email) on a unique index
EXPLAIN (ANALYZE, BUFFERS OFF, VERBOSE, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT customer_id FROM customers WHERE lower(email) = 'ken.name0751234@example.com';
-- covering: keys and included columns answer without fetching facts
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT first_name, town FROM customers WHERE last_name = 'Name042';
-- the same index is key-only when the query needs more columns
EXPLAIN (COSTS OFF) SELECT email FROM customers WHERE last_name = 'Name042';
-- skew: the common value (90% of rows) scans, a rare one uses the index
EXPLAIN (COSTS OFF) SELECT * FROM customers WHERE town = 'Redmond';
EXPLAIN (COSTS OFF) SELECT * FROM customers WHERE town = 'Town33';
-- multi-valued key: one entry per actor
EXPLAIN (VERBOSE, COSTS OFF) SELECT title FROM films WHERE 'Actor017' = ANY (actors);
EXPLAIN (COSTS OFF) SELECT title FROM films WHERE actors @> ARRAY['Actor017', 'Actor100'];
-- a join on an indexed key runs one lookup per outer row
CREATE TABLE orders AS
  SELECT customer_id * 10 AS order_id, lower(email) AS email FROM customers
  WHERE customer_id IN (7, 70, 700);
ANALYZE orders;
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT o.order_id, c.customer_id FROM orders o
  JOIN customers c ON lower(c.email) = o.email;
-- rows in key order: ORDER BY a key after an equality prefix needs no Sort,
-- and LIMIT stops the lookup early (NULL keys come last, as in ORDER BY)
SELECT idxtable.create_index('customers', '{town,customer_id}', name => 'customers_town_id');
SELECT idxtable.create_index('customers', '{customer_id}', '{town}', name => 'customers_id_town');
-- (with plain scans off: MongoDB's _id index would serve these as well)
SET idxtable.enable_plain_scan = off;
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT * FROM customers WHERE town = 'Town07' ORDER BY customer_id LIMIT 4;
EXPLAIN (ANALYZE, BUFFERS OFF, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT customer_id, town FROM customers ORDER BY customer_id LIMIT 3;
RESET idxtable.enable_plain_scan;
CREATE FUNCTION same_order(query text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  routed text;
  plain text;
BEGIN
  EXECUTE format('SELECT string_agg(t::text, '','') FROM (%s) t', query) INTO routed;
  SET LOCAL idxtable.enable_index_routing = off;
  EXECUTE format('SELECT string_agg(t::text, '','') FROM (%s) t', query) INTO plain;
  SET LOCAL idxtable.enable_index_routing = on;
  RETURN CASE WHEN routed IS NOT DISTINCT FROM plain THEN 'same order: ' ELSE 'DIFFERENT: ' END || query;
END $$;
SELECT same_order(q) FROM (VALUES
  ('SELECT customer_id FROM customers WHERE town = ''Town07'' ORDER BY customer_id LIMIT 10'),
  ('SELECT customer_id, town FROM customers ORDER BY customer_id LIMIT 5'),
  ('SELECT customer_id, town FROM customers WHERE town IS NULL ORDER BY customer_id LIMIT 5'),
  ('SELECT customer_id FROM customers WHERE town = ''Town07'' AND customer_id > 5000 ORDER BY customer_id LIMIT 10')
) AS v(q);
SELECT idxtable.drop_index('customers_town_id');
SELECT idxtable.drop_index('customers_id_town');
-- the GUC turns routing off, like enable_indexscan
SET idxtable.enable_index_routing = off;
EXPLAIN (COSTS OFF) SELECT * FROM customers WHERE town = 'Town06' AND last_name = 'Name045';
RESET idxtable.enable_index_routing;
-- every routed query returns what the plain scan returns
CREATE FUNCTION same_rows(query text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  routed text;
  plain text;
BEGIN
  EXECUTE format('SELECT md5(string_agg(t::text, '','' ORDER BY t::text)) || '' '' || count(*) FROM (%s) t', query) INTO routed;
  SET LOCAL idxtable.enable_index_routing = off;
  EXECUTE format('SELECT md5(string_agg(t::text, '','' ORDER BY t::text)) || '' '' || count(*) FROM (%s) t', query) INTO plain;
  SET LOCAL idxtable.enable_index_routing = on;
  RETURN CASE WHEN routed IS NOT DISTINCT FROM plain THEN 'same ' ELSE 'DIFFERENT ' END ||
         coalesce(split_part(routed, ' ', 2), '0') || ' rows: ' || query;
END $$;
SELECT same_rows(q) FROM (VALUES
  ('SELECT * FROM customers WHERE town = ''Town06'' AND last_name = ''Name045'''),
  ('SELECT * FROM customers WHERE town = ''Town07'''),
  ('SELECT * FROM customers WHERE town IN (''Town07'', ''Town08'', NULL)'),
  ('SELECT * FROM customers WHERE town = ANY (''{}''::text[])'),
  ('SELECT * FROM customers WHERE town = ANY (''{NULL}''::text[])'),
  ('SELECT * FROM customers WHERE town = ''Town07'' AND last_name COLLATE "C" < ''Name010'''),
  ('SELECT * FROM customers WHERE town = ''Town07'' AND last_name COLLATE "C" >= ''Name090'''),
  ('SELECT customer_id FROM customers WHERE lower(email) = ''ken.name0751234@example.com'''),
  ('SELECT * FROM customers WHERE lower(email) IN (''x'', ''grace.name004500@example.com'')'),
  ('SELECT first_name, town FROM customers WHERE last_name = ''Name042'''),
  ('SELECT first_name, town FROM customers WHERE last_name = ''Name042'' AND town IS NULL'),
  ('SELECT * FROM customers WHERE town IS NULL'),
  ('SELECT * FROM customers WHERE town = ''Town33'''),
  ('SELECT title FROM films WHERE ''Actor017'' = ANY (actors)'),
  ('SELECT title FROM films WHERE actors @> ARRAY[''Actor017'', ''Actor100'']'),
  ('SELECT o.order_id, c.customer_id FROM orders o JOIN customers c ON lower(c.email) = o.email')
) AS v(q);
-- a stale entry (its fact no longer matches) never shows: facts are rechecked
\! /usr/bin/python3 test/fixtures/stale_entry.py idxtable_regress idxtable.customers.customers_town_last_name_idx Town06 Name045 1
SELECT customer_id, town FROM customers WHERE town = 'Town06' AND last_name = 'Name045';
