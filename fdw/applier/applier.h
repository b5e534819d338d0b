/*-------------------------------------------------------------------------
 *
 * applier.h
 *		  The parts of the change-stream applier, each used only by those
 *		  above it: applier.c (the worker: its catalog, its round over the
 *		  streams) uses applier_stream.c (one stream per MongoDB database:
 *		  its batches), which uses applier_position.c (its stored position
 *		  and heartbeats), applier_apply.c (a batch's facts applied to
 *		  index tables) and the other applier_*.c files; all of them use
 *		  applier_state.c (applier_state.h: the types they share and the
 *		  process's state).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/applier/applier.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_APPLIER_H
#define IDXTABLE_APPLIER_H

#include "applier/applier_state.h"

/* ---- applier_stream.c ---- */
extern void idx_applier_open_stream(AppStream *s);
extern void idx_applier_step(AppStream *s, int poll_ms);
extern void idx_applier_close_stream(AppStream *s);
extern void idx_applier_save_position(AppStream *s, bool force);

/* ---- applier_position.c ---- */
extern bool idx_applier_read_position(AppStream *s, bson_t **token,
									  IdxClusterTime *covered,
									  List **followed, List **watched,
									  bool *start_after, bool *other_server);
extern bool idx_applier_position_held(AppStream *s, bool force);
extern void idx_applier_store_position(AppStream *s, bool force,
									   TimestampTz now);
extern bool idx_applier_heartbeat(AppStream *s);

/* ---- applier_apply.c ---- */
extern int64 idx_applier_repair(AppStream *s, AppIndex *ix,
								const bson_value_t *ids,
								const bson_t *const *images, int n);
extern void idx_applier_apply_facts(AppStream *s, CollIds *c);
extern void idx_applier_recheck_spared(AppStream *s);
extern void idx_applier_forget_spared(AppStream *s);

/* ---- applier_exclude.c ---- */
extern void idx_exclude_open(AppStream *s);
extern void idx_exclude_before_get_more(AppStream *s);
extern IdxCsResult idx_exclude_arm(AppStream *s);
extern bool idx_exclude_must_disarm(AppStream *s);
extern IdxCsResult idx_exclude_disarm(AppStream *s);
extern void idx_exclude_after_batch(AppStream *s, bool complete);
extern void idx_exclude_close(AppStream *s);
extern uint64 idx_exclude_doubts_looked(void);

/* ---- applier_denied.c ---- */
extern void idx_applier_deny(AppStream *s);
extern bool idx_applier_may_open(AppStream *s);
extern void idx_applier_stream_allowed(AppStream *s);
extern void idx_applier_denied_sleep(void);

/* ---- applier_split.c ---- */
extern const bson_t *idx_applier_take_fragment(AppStream *s,
											   const bson_t *event,
											   const bson_iter_t *split);
extern void idx_applier_forget_split(AppStream *s);

/* ---- applier_durable.c ---- */
extern void idx_applier_note_election(AppStream *s);
extern bool idx_applier_primary_kept(AppStream *s);
extern void idx_applier_primary_changed(AppStream *s, int attempt);

/* ---- applier_markers.c ---- */
extern void idx_applier_keep_markers(AppStream *s, List *markers,
									 List *times);
extern Marker *idx_applier_kept_marker(AppStream *s, const uint8_t *lsid,
									   uint32_t len, int64 txn);
extern void idx_applier_forget_markers(AppStream *s);
extern bool idx_applier_awaits_marker(AppStream *s, const uint8_t *lsid,
									  uint32_t len, uint8 **registry,
									  int *nregistry);

/* ---- applier_fields.c ---- */
extern bool idx_applier_index_fields(AppIndex *ix, List **fields);
extern bool idx_applier_update_touches(const bson_t *desc, List *fields);

#endif							/* IDXTABLE_APPLIER_H */
