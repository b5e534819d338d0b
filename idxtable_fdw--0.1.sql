/* idxtable_fdw--0.1.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION idxtable_fdw" to load this file. \quit

CREATE FUNCTION idxtable_fdw_handler()
RETURNS fdw_handler
AS 'MODULE_PATHNAME'
LANGUAGE C STRICT;

CREATE FUNCTION idxtable_fdw_validator(text[], oid)
RETURNS void
AS 'MODULE_PATHNAME'
LANGUAGE C STRICT;

CREATE FOREIGN DATA WRAPPER idxtable_fdw
  HANDLER idxtable_fdw_handler
  VALIDATOR idxtable_fdw_validator;

COMMENT ON FOREIGN DATA WRAPPER idxtable_fdw IS
  'MongoDB collections as foreign tables, with FDW-maintained index collections';

CREATE FUNCTION idxtable_fdw_disconnect_all()
RETURNS bool
AS 'MODULE_PATHNAME'
LANGUAGE C STRICT PARALLEL RESTRICTED;
