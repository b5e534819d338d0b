--
-- conflicts: a client writing straight into MongoDB gives a unique key to a
-- second fact.  verify_index counts the conflict, repair_index reports it,
-- records it in idxtable.conflicts, keeps the claim with the fact that held
-- it and repairs every other entry of both facts; a write through the FDW
-- of a key that a fact written outside holds fails with 23505 in both write
-- modes.  The outside writes are made by test/fixtures/outside_write.py.
-- Whether or not a change-stream applier has applied them meanwhile, what
-- is shown is the same (counts of what was fixed are not shown).
--
\! /usr/bin/python3 test/fixtures/outside_write.py idxtable_conflicts drop
CREATE FOREIGN TABLE cfl (_id text, email text, codes text[], town text, n int)
  SERVER mongo OPTIONS (database 'idxtable_conflicts', collection 'cfl',
                        consistency 'transaction');
SELECT idxtable.create_index('cfl', '{lower(email)}', include => '{n}',
                             is_unique => true, name => 'cfl_email');
SELECT idxtable.create_index('cfl', '{codes}', is_unique => true, name => 'cfl_codes');
SELECT idxtable.create_index('cfl', '{town}', name => 'cfl_town');
INSERT INTO cfl VALUES ('1', 'ann@x.org', '{a1,a2}', 'Oslo', 1),
                       ('2', 'ben@x.org', '{b1}', 'Rome', 2);
SELECT * FROM idxtable.verify_index('cfl_email');
SELECT count(*) FROM idxtable.conflicts;

-- outside: fact 3 takes Ann's address (in other case) and code a2, and has
-- a code of its own; fact 4 is new with keys nobody has; fact 1's included
-- n changes
\! /usr/bin/python3 test/fixtures/outside_write.py idxtable_conflicts insert cfl '{"_id": "3", "email": "ANN@x.org", "codes": ["a2", "c1"], "town": "Lima", "n": 3}'
\! /usr/bin/python3 test/fixtures/outside_write.py idxtable_conflicts insert cfl '{"_id": "4", "email": "dee@x.org", "codes": ["d1"], "town": "Kiev", "n": 4}'
\! /usr/bin/python3 test/fixtures/outside_write.py idxtable_conflicts set cfl '{"_id": "1"}' '{"n": 10}'
-- each unique index has one conflict (fact 3's key held by fact 1): not
-- counted as missing; repair reports it and leaves it
SELECT conflicts FROM idxtable.verify_index('cfl_email');
SELECT conflicts FROM idxtable.verify_index('cfl_codes');
SELECT conflicts FROM idxtable.repair_index('cfl_email');
SELECT conflicts FROM idxtable.repair_index('cfl_codes');
SELECT conflicts FROM idxtable.repair_index('cfl_town');
-- then only the conflicts remain: the claims stay fact 1's, with its new
-- n; fact 3's own code c1 and fact 4's keys are in; fact 3 has under ann
-- and a2 a conflict entry (an entry with its _id, as a non-unique index
-- has), so that reads through the index find it too
SELECT * FROM idxtable.verify_index('cfl_email');
SELECT * FROM idxtable.verify_index('cfl_codes');
SELECT * FROM idxtable.verify_index('cfl_town');
\! /usr/bin/python3 test/fixtures/outside_write.py idxtable_conflicts show idxtable.cfl.cfl_email
\! /usr/bin/python3 test/fixtures/outside_write.py idxtable_conflicts show idxtable.cfl.cfl_codes
SELECT index_name, key, fact_id, holder_id, found_at <= now() AS found
  FROM idxtable.conflicts ORDER BY index_name, fact_id;
-- repeated, a repair records each conflict once
SELECT conflicts FROM idxtable.repair_index('cfl_email');
SELECT index_name, fact_id, holder_id FROM idxtable.conflicts ORDER BY 1, 2;
-- routed reads find the outside facts by their keys, also both facts of
-- a key in conflict
SET idxtable.enable_plain_scan = off;
SELECT _id, n FROM cfl WHERE lower(email) = 'ann@x.org' ORDER BY _id;
SELECT _id FROM cfl WHERE 'a2' = ANY (codes) ORDER BY _id;
SELECT _id, n FROM cfl WHERE lower(email) = 'dee@x.org';
SELECT _id FROM cfl WHERE 'c1' = ANY (codes) OR 'd1' = ANY (codes) ORDER BY _id;
SELECT _id FROM cfl WHERE town = 'Lima';
RESET idxtable.enable_plain_scan;

-- writes through the FDW of keys that outside facts hold (their claims
-- brought in by repair_index) fail with the usual DETAIL, in both modes
-- (transaction mode: not in show_error, whose savepoint would abort the
-- MongoDB transaction first)
INSERT INTO cfl VALUES ('5', 'Dee@x.org', NULL, NULL, 5);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO cfl VALUES ('5', 'eve@x.org', '{c1}', NULL, 5);
\echo :LAST_ERROR_SQLSTATE
UPDATE cfl SET email = 'DEE@X.ORG' WHERE _id = '2';
\echo :LAST_ERROR_SQLSTATE
UPDATE cfl SET codes = '{b1,d1}' WHERE _id = '2';
\echo :LAST_ERROR_SQLSTATE
ALTER FOREIGN TABLE cfl OPTIONS (SET consistency 'ordered');
SELECT show_error($$INSERT INTO cfl VALUES ('5', 'Dee@x.org', NULL, NULL, 5)$$);
SELECT show_error($$INSERT INTO cfl VALUES ('5', 'eve@x.org', '{c1}', NULL, 5)$$);
SELECT show_error($$UPDATE cfl SET email = 'DEE@X.ORG' WHERE _id = '2'$$);
SELECT show_error($$UPDATE cfl SET codes = '{b1,d1}' WHERE _id = '2'$$);
-- nothing of them remains
SELECT _id, email, codes, n FROM cfl ORDER BY _id;
SELECT * FROM idxtable.verify_index('cfl_email');
SELECT * FROM idxtable.verify_index('cfl_codes');

-- the conflicts table shows a role the rows of tables it may read
CREATE ROLE regress_cfl_reader;
SET ROLE regress_cfl_reader;
SELECT count(*) FROM idxtable.conflicts;
SELECT show_error($$DELETE FROM idxtable.conflicts$$);
RESET ROLE;
GRANT SELECT ON cfl TO regress_cfl_reader;
SET ROLE regress_cfl_reader;
SELECT index_name, fact_id FROM idxtable.conflicts ORDER BY 1, 2;
RESET ROLE;
REVOKE SELECT ON cfl FROM regress_cfl_reader;
DROP ROLE regress_cfl_reader;

-- resolved outside (fact 3 changes its address and drops code a2): the
-- next repair brings fact 3's entries in and its conflicts are gone
\! /usr/bin/python3 test/fixtures/outside_write.py idxtable_conflicts set cfl '{"_id": "3"}' '{"email": "cid@x.org", "codes": ["c1"]}'
SELECT conflicts FROM idxtable.repair_index('cfl_email');
SELECT conflicts FROM idxtable.repair_index('cfl_codes');
SELECT * FROM idxtable.verify_index('cfl_email');
SELECT * FROM idxtable.verify_index('cfl_codes');
SELECT count(*) FROM idxtable.conflicts;

-- covering reads (no facts read) find both facts of a key in conflict
CREATE FOREIGN TABLE cfl_cov (_id text, email text, n int)
  SERVER mongo OPTIONS (database 'idxtable_conflicts', collection 'cfl_cov');
SELECT idxtable.create_index('cfl_cov', '{email}', include => '{n}',
                             is_unique => true, name => 'cfl_cov_email');
\! /usr/bin/python3 test/fixtures/outside_write.py idxtable_conflicts insert cfl_cov '{"_id": "1", "email": "bob@x.org", "n": 1}'
\! /usr/bin/python3 test/fixtures/outside_write.py idxtable_conflicts insert cfl_cov '{"_id": "2", "email": "bob@x.org", "n": 2}'
SELECT conflicts FROM idxtable.repair_index('cfl_cov_email');
SET idxtable.enable_plain_scan = off;
EXPLAIN (COSTS OFF) SELECT n FROM cfl_cov WHERE email = 'bob@x.org';
SELECT n FROM cfl_cov WHERE email = 'bob@x.org' ORDER BY n;
RESET idxtable.enable_plain_scan;
DROP FOREIGN TABLE cfl_cov;

-- a fact in conflict over two keys with one holder (fact 5 has Ann's codes
-- a1 and a2) is one conflict, in verify_index, repair_index and
-- sync_status alike: each counts facts in conflict
\! /usr/bin/python3 test/fixtures/outside_write.py idxtable_conflicts insert cfl '{"_id": "5", "email": "eve@x.org", "codes": ["a1", "a2"], "town": "Bern", "n": 5}'
SELECT conflicts FROM idxtable.repair_index('cfl_codes');
SELECT conflicts FROM idxtable.verify_index('cfl_codes');
SELECT conflicts FROM idxtable.sync_status WHERE name = 'cfl_codes';
SELECT index_name, fact_id, holder_id FROM idxtable.conflicts
 WHERE index_name = 'cfl_codes';
\! /usr/bin/python3 test/fixtures/outside_write.py idxtable_conflicts set cfl '{"_id": "5"}' '{"codes": ["e1"]}'
SELECT conflicts FROM idxtable.repair_index('cfl_codes');
SELECT conflicts FROM idxtable.sync_status WHERE name = 'cfl_codes';

-- the rows of an index go with it
\! /usr/bin/python3 test/fixtures/outside_write.py idxtable_conflicts set cfl '{"_id": "4"}' '{"email": "ann@x.org"}'
SELECT conflicts FROM idxtable.repair_index('cfl_email');
SELECT index_name, fact_id, holder_id FROM idxtable.conflicts;
SELECT idxtable.drop_index('cfl_email');
SELECT count(*) FROM idxtable.conflicts;
DROP FOREIGN TABLE cfl;
