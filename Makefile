# Makefile for idxtable_fdw (PGXS)

MODULE_big = idxtable_fdw
OBJS = \
	fdw/idxtable_fdw.o \
	fdw/core/guc.o \
	fdw/core/option.o \
	fdw/core/consistency.o \
	fdw/core/table_size.o \
	fdw/core/document.o \
	fdw/core/xact_state.o \
	fdw/core/xact.o \
	fdw/coordinator.o \
	fdw/sync/xact_marker.o \
	fdw/core/remote_op.o \
	fdw/core/message_scrub.o \
	fdw/core/remote_error.o \
	fdw/core/privileges.o \
	fdw/core/handle.o \
	fdw/index/index_write.o \
	fdw/index/index_claims.o \
	fdw/index/index_verify.o \
	fdw/index/index_repair.o \
	fdw/index/index_repair_claims.o \
	fdw/index/index_repair_batch.o \
	fdw/index/index_repair_named.o \
	fdw/index/index_conflict.o \
	fdw/modify.o \
	fdw/modify_insert.o \
	fdw/modify_batch.o \
	fdw/modify_undo.o \
	fdw/modify_fact.o \
	fdw/modify_row.o \
	fdw/index/bulk_write.o \
	fdw/core/shard_key.o \
	fdw/core/shard_explain.o \
	fdw/core/rowid.o \
	fdw/core/convert_path.o \
	fdw/core/connection.o \
	fdw/core/stream.o \
	fdw/core/reply_check.o \
	fdw/core/convert.o \
	fdw/core/convert_row.o \
	fdw/core/convert_error.o \
	fdw/core/convert_text.o \
	fdw/core/convert_describe.o \
	fdw/core/convert_write.o \
	fdw/core/convert_json.o \
	fdw/core/clause_shape.o \
	fdw/core/deparse.o \
	fdw/core/collate_bytes.o \
	fdw/core/text_order.o \
	fdw/core/deparse_text.o \
	fdw/core/deparse_expr.o \
	fdw/planner.o \
	fdw/path_shared.o \
	fdw/scan.o \
	fdw/scan_cursor.o \
	fdw/scan_node.o \
	fdw/upper.o \
	fdw/order_path.o \
	fdw/order_scan.o \
	fdw/agg_path.o \
	fdw/agg_scan.o \
	fdw/route_agg.o \
	fdw/route_agg_scan.o \
	fdw/route_estimate.o \
	fdw/route_path.o \
	fdw/route_scan.o \
	fdw/route_lookup.o \
	fdw/route_id_order.o \
	fdw/index/index_stats.o \
	fdw/analyze.o \
	fdw/import.o \
	fdw/index/index_catalog.o \
	fdw/index/index_entry.o \
	fdw/index/index_key_type.o \
	fdw/index/index_collate.o \
	fdw/index/index_ddl.o \
	fdw/index/index_defs_sql.o \
	fdw/index/index_limits.o \
	fdw/index/index_notify.o \
	fdw/index/index_owner.o \
	fdw/index/index_privileges.o \
	fdw/index/index_shard.o \
	fdw/index/index_build.o \
	fdw/index/index_online.o \
	fdw/index/index_utility.o \
	fdw/core/trust.o \
	fdw/core/mongo_limits.o \
	fdw/core/protocol_read.o \
	fdw/sync/sync_state.o \
	fdw/sync/sync_sessions.o \
	fdw/sync/sync_wait.o \
	fdw/sync/cluster_time.o \
	fdw/sync/sync_notify.o \
	fdw/sync/sync_status.o \
	fdw/applier/change_stream.o \
	fdw/applier/applier_state.o \
	fdw/applier/applier.o \
	fdw/applier/applier_stream.o \
	fdw/applier/applier_position.o \
	fdw/applier/applier_apply.o \
	fdw/applier/applier_exclude.o \
	fdw/applier/applier_fields.o \
	fdw/applier/applier_denied.o \
	fdw/applier/applier_split.o \
	fdw/applier/applier_markers.o \
	fdw/applier/applier_durable.o \
	fdw/applier/launcher.o

EXTENSION = idxtable_fdw
DATA = idxtable_fdw--0.1.sql
PGFILEDESC = "idxtable_fdw - MongoDB foreign data wrapper with index tables"

REGRESS = setup options types pushdown idlookup prepared import analyze errors indexes writes verify routing auth pushdown_order pushdown_agg eventual build sync conflicts stream security security_catalog security_naming security_writes security_limits sharded xact_ddl idround arrpath undefined sync_reads pushdown_idxlimit pushdown_idxorder collate pushdown_cond plan_stats pushdown_idxagg pushdown_textorder create_index
REGRESS_OPTS = --inputdir=.

# libmongoc through pkg-config: 2.x installs mongoc2.pc and bson2.pc,
# 1.x libmongoc-1.0.pc (which requires libbson-1.0); 2.x is taken when both
# are there (MONGOC_PC=libmongoc-1.0 on the command line takes 1.x).  Both
# install <mongoc/mongoc.h> and <bson/bson.h> under the folder their
# --cflags name; fdw/core/mongoc_compat.h includes them and hides what
# differs between the versions.  Their folders are system headers to the
# compiler (-isystem): libbson 1.30's inline functions would otherwise
# warn under PostgreSQL's -Wdeclaration-after-statement in every file.
MONGOC_PC ?= $(shell pkg-config --exists mongoc2 bson2 && echo mongoc2 bson2 || \
	(pkg-config --exists libmongoc-1.0 && echo libmongoc-1.0))
ifeq ($(MONGOC_PC),)
ifeq ($(filter clean distclean,$(MAKECMDGOALS)),)
$(error libmongoc not found by pkg-config (neither mongoc2.pc nor libmongoc-1.0.pc): install libmongoc-dev and libbson-dev, or set PKG_CONFIG_PATH)
endif
endif
MONGOC_CFLAGS := $(patsubst -I%,-isystem %,$(shell pkg-config --cflags $(MONGOC_PC)))
MONGOC_LIBS := $(shell pkg-config --libs $(MONGOC_PC))
PG_CPPFLAGS = $(MONGOC_CFLAGS) -I$(srcdir)/fdw
# ICU sort keys of text index keys (index_collate.c): the library the
# server was built with
ICU_LIBS := $(shell pkg-config --libs icu-i18n icu-uc 2>/dev/null)
SHLIB_LINK = $(MONGOC_LIBS) $(ICU_LIBS)

EXTRA_CLEAN = results regression.diffs regression.out

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# PGXS tracks header dependencies only in a PostgreSQL build configured
# with --enable-depend: rebuild every object when one of our headers
# changes (struct layouts are shared between files).
$(OBJS): $(wildcard $(srcdir)/fdw/*.h $(srcdir)/fdw/*/*.h)

# make installcheck first loads the MongoDB documents the regression tests
# read (database idxtable_regress and the others of
# test/fixtures/load_regress.py, in the MongoDB that MONGO_URI names), so
# that it works on its own inside eval "$(test/env start)"
TEST_PYTHON ?= /usr/bin/python3
.PHONY: regress-documents
installcheck: regress-documents
regress-documents:
	$(TEST_PYTHON) $(srcdir)/test/fixtures/load_regress.py
