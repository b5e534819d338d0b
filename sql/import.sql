--
-- import: IMPORT FOREIGN SCHEMA infers columns from sampled documents.
-- A text _id, and a text column whose sample holds ObjectIds, is declared
-- COLLATE "C" (MongoDB's byte order), which a NOTICE says.
--
CREATE SCHEMA imported;
IMPORT FOREIGN SCHEMA idxtable_regress LIMIT TO (people, objids, empty, types)
  FROM SERVER mongo INTO imported;
\det+ imported.*
\d imported.people
\d imported.types
\d imported.objids
SELECT * FROM imported.objids ORDER BY 1;
SELECT count(*) FROM imported.empty;
IMPORT FOREIGN SCHEMA idxtable_regress EXCEPT (people, objids, empty, types, bad)
  FROM SERVER mongo INTO imported;
\det imported.*
IMPORT FOREIGN SCHEMA idxtable_regress FROM SERVER mongo INTO imported
  OPTIONS (sample_size '0');
IMPORT FOREIGN SCHEMA idxtable_regress FROM SERVER mongo INTO imported
  OPTIONS (sample 'x');
DROP SCHEMA imported CASCADE;
