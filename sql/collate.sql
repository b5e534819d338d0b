--
-- collate: text keys of index tables under the column's collation.  Under
-- an ICU collation an entry holds the collation's sort key, then the text,
-- so that equality, IN, ranges and ORDER BY are served by the index in the
-- collation's order; a collation that orders as bytes (C, libc C.utf8)
-- keeps the text itself; a nondeterministic one is never routed.  A changed
-- collation version makes the index stale until verify_index or
-- repair_index find or make it right, or rebuild_index writes it again.
--
\! /usr/bin/python3 test/fixtures/documents.py delete collate_words '{}' > /dev/null
CREATE COLLATION regress_ci (provider = icu, locale = 'und-u-ks-level2',
                             deterministic = false);
CREATE FOREIGN TABLE collate_words (
    id int OPTIONS (field '_id'),
    w text COLLATE "en-x-icu",
    b text COLLATE "C.utf8",
    ci text COLLATE regress_ci,
    n int)
  SERVER mongo OPTIONS (database 'idxtable_writes', collection 'collate_words');
INSERT INTO collate_words (id, w, b, ci, n)
  SELECT i, w, w, w, i % 3
    FROM unnest(ARRAY['apple', 'Apple', 'APPLE', 'banana', 'Banana', 'äpfel',
                      'zebra', 'Zoo', 'éclair', 'eclair', 'Eclair', 'cote',
                      'côte', 'coté', 'côté', '', '1', '10', '9', 'a b',
                      'a-b', 'ab', 'straße', 'strasse', NULL])
         WITH ORDINALITY AS u(w, i);
-- the same rows in a heap table: every result below must equal its
CREATE TEMP TABLE local_words AS SELECT * FROM collate_words;

SELECT idxtable.create_index('collate_words', '{w}', include => '{n}',
                             name => 'collate_words_w');
SELECT idxtable.create_index('collate_words', '{n, w}', name => 'collate_words_nw');
SELECT idxtable.create_index('collate_words', '{b}', name => 'collate_words_b');
SELECT idxtable.create_index('collate_words', '{ci}', name => 'collate_words_ci');
-- the collation whose sort keys the entries hold, and its version, which
-- is PostgreSQL's
SELECT idxtable.collation_version('"en-x-icu"')
       = pg_collation_actual_version('"en-x-icu"'::regcollation) AS same_version;
SELECT name, key_collations,
       (SELECT bool_and(v IS NOT DISTINCT FROM idxtable.collation_version(c))
          FROM ROWS FROM (unnest(key_collations), unnest(collation_versions))
               AS u(c, v)) AS current_versions
  FROM idxtable.index_defs WHERE name LIKE 'collate_words%' ORDER BY name;

-- the stored keys, read straight from the index collection: MongoDB's
-- (binary) order of them is the collation's order, ties broken by bytes
CREATE FOREIGN TABLE collate_words_w_entries (
    k text OPTIONS (field '_id.k0'),
    c text OPTIONS (field 'v.c0'))
  SERVER mongo OPTIONS (database 'idxtable_writes',
                        collection 'idxtable.collate_words.collate_words_w');
SELECT count(*) AS entries,
       bool_and(right(k, length(c)) = c) AS text_after_sort_key,
       bool_and(k ~ '^([0-9a-f][0-9a-f])*00') AS hex_sort_key
  FROM collate_words_w_entries WHERE k IS NOT NULL;
SELECT (SELECT array_agg(c) FROM (SELECT c FROM collate_words_w_entries
                                   WHERE k IS NOT NULL
                                   ORDER BY k COLLATE "C") s)
     = (SELECT array_agg(w) FROM (SELECT w FROM local_words WHERE w IS NOT NULL
                                   ORDER BY w) s) AS stored_order_is_collation_order;

SET idxtable.enable_plain_scan = off;
-- ORDER BY the key: the index's order, NULLs last, as PostgreSQL's
EXPLAIN (COSTS OFF) SELECT w FROM collate_words ORDER BY w;
SELECT w FROM collate_words ORDER BY w;
SELECT (SELECT array_agg(w) FROM (SELECT w FROM collate_words ORDER BY w) s)
  IS NOT DISTINCT FROM
       (SELECT array_agg(w) FROM (SELECT w FROM local_words ORDER BY w) s) AS same;
-- after an equality on the first key
EXPLAIN (COSTS OFF) SELECT w FROM collate_words WHERE n = 1 ORDER BY w;
SELECT (SELECT array_agg(w) FROM (SELECT w FROM collate_words WHERE n = 1 ORDER BY w) s)
  IS NOT DISTINCT FROM
       (SELECT array_agg(w) FROM (SELECT w FROM local_words WHERE n = 1 ORDER BY w) s) AS same;
-- ranges, equality and IN under the column's collation
EXPLAIN (VERBOSE, COSTS OFF)
  SELECT id FROM collate_words WHERE w >= 'b' AND w < 'E';
SELECT w FROM collate_words WHERE w >= 'b' AND w < 'E' ORDER BY w;
SELECT array_agg(id ORDER BY id) FROM collate_words WHERE w >= 'b' AND w < 'E'
EXCEPT SELECT array_agg(id ORDER BY id) FROM local_words WHERE w >= 'b' AND w < 'E';
SELECT w FROM collate_words WHERE w > 'côte' AND w <= 'éclair' ORDER BY w;
SELECT w FROM local_words WHERE w > 'côte' AND w <= 'éclair' ORDER BY w;
SELECT id, w FROM collate_words WHERE w = 'Apple';
SELECT id, w FROM collate_words WHERE w IN ('eclair', 'Éclair', 'éclair') ORDER BY id;
SELECT id, w FROM collate_words WHERE w = 'a' || 'b';
-- a covering read returns the text, not the stored form
EXPLAIN (COSTS OFF) SELECT w, n FROM collate_words WHERE w < 'b';
SELECT w, n FROM collate_words WHERE w < 'b' ORDER BY w;
-- under another collation: equality is byte equality and is routed; a
-- range or an order is not the entries' order and stays local
EXPLAIN (COSTS OFF) SELECT id FROM collate_words WHERE w = 'zebra' COLLATE "C";
EXPLAIN (COSTS OFF) SELECT id FROM collate_words WHERE w < 'b' COLLATE "C";
SELECT w FROM collate_words WHERE w < 'b' COLLATE "C" ORDER BY w COLLATE "C";
EXPLAIN (COSTS OFF) SELECT w FROM collate_words ORDER BY w COLLATE "C";
-- a collation that orders as bytes: the entries hold the text itself
EXPLAIN (COSTS OFF) SELECT b FROM collate_words WHERE b > 'Z' ORDER BY b;
SELECT b FROM collate_words WHERE b > 'Z' ORDER BY b;
-- a nondeterministic collation: never routed, not even equality
EXPLAIN (COSTS OFF) SELECT id FROM collate_words WHERE ci = 'apple';
SELECT id FROM collate_words WHERE ci = 'apple' ORDER BY id;
RESET idxtable.enable_plain_scan;

-- writes keep the entries in the collation's order
UPDATE collate_words SET w = 'Éclair' WHERE id = 9;
INSERT INTO collate_words (id, w, n) VALUES (100, 'ébène', 1), (101, 'Ebene', 2);
INSERT INTO local_words (id, w, n) VALUES (100, 'ébène', 1), (101, 'Ebene', 2);
UPDATE local_words SET w = 'Éclair' WHERE id = 9;
SET idxtable.enable_plain_scan = off;
SELECT w FROM collate_words WHERE w >= 'e' AND w < 'f' ORDER BY w;
SELECT w FROM local_words WHERE w >= 'e' AND w < 'f' ORDER BY w;
RESET idxtable.enable_plain_scan;
SELECT (idxtable.verify_index('collate_words_w')).*;

-- a unique index: a duplicate is described by its text
SELECT idxtable.create_index('collate_words', '{w}', is_unique => true,
                             name => 'collate_words_w_unique');
INSERT INTO collate_words (id, w) VALUES (102, 'Zoo');
\echo :LAST_ERROR_SQLSTATE
SELECT idxtable.drop_index('collate_words_w_unique');

-- a collation version other than the entries': stale, no routing
UPDATE idxtable.index_defs SET collation_versions = '{0.0}'
  WHERE name = 'collate_words_w';
SELECT name, state FROM idxtable.indexes WHERE name = 'collate_words_w';
SET idxtable.enable_plain_scan = off;
EXPLAIN (COSTS OFF) SELECT id FROM collate_words WHERE w = 'zebra';
RESET idxtable.enable_plain_scan;
-- in a read-only transaction verify_index verifies without recording
BEGIN READ ONLY;
SELECT (idxtable.verify_index('collate_words_w')).*;
COMMIT;
SELECT name, state FROM idxtable.indexes WHERE name = 'collate_words_w';
-- verify_index finds the entries right under the version now: valid again
SELECT (idxtable.verify_index('collate_words_w')).*;
SELECT name, state FROM idxtable.indexes WHERE name = 'collate_words_w';
SET idxtable.enable_plain_scan = off;
EXPLAIN (COSTS OFF) SELECT id FROM collate_words WHERE w = 'zebra';
RESET idxtable.enable_plain_scan;
-- entries whose sort keys did change (as if written under Swedish, where
-- ä follows z): verify_index finds them wrong (the fact's entry missing,
-- the old one stale) and leaves the index stale, repair_index rewrites
-- them under the recorded collation
UPDATE idxtable.index_defs
  SET key_collations = '{sv-x-icu}', collation_versions = '{0.0}'
  WHERE name = 'collate_words_w';
SELECT missing > 0 AS missing, stale > 0 AS stale
  FROM idxtable.verify_index('collate_words_w');
SELECT name, state FROM idxtable.indexes WHERE name = 'collate_words_w';
SELECT missing > 0 AS missing, stale > 0 AS stale
  FROM idxtable.repair_index('collate_words_w');
SELECT name, state FROM idxtable.indexes WHERE name = 'collate_words_w';
SELECT (idxtable.verify_index('collate_words_w')).*;
-- equality is served by the Swedish entries, the column's order is not
SET idxtable.enable_plain_scan = off;
EXPLAIN (COSTS OFF) SELECT id FROM collate_words WHERE w = 'äpfel';
SELECT id FROM collate_words WHERE w = 'äpfel';
EXPLAIN (COSTS OFF) SELECT id FROM collate_words WHERE w < 'b';
RESET idxtable.enable_plain_scan;
-- rebuild_index records the version too
UPDATE idxtable.index_defs SET collation_versions = NULL
  WHERE name = 'collate_words_w';
SELECT name, state FROM idxtable.indexes WHERE name = 'collate_words_w';
SELECT idxtable.rebuild_index('collate_words_w');
SELECT name, state FROM idxtable.indexes WHERE name = 'collate_words_w';

SELECT idxtable.drop_index(name) FROM idxtable.index_defs
  WHERE name LIKE 'collate_words%' ORDER BY name;
DROP FOREIGN TABLE collate_words, collate_words_w_entries;
DROP TABLE local_words;
DROP COLLATION regress_ci;
