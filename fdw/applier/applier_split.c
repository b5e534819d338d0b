/*-------------------------------------------------------------------------
 *
 * applier_split.c
 *		  The fragments of a change event that MongoDB 7.0+ split
 *		  ($changeStreamSplitLargeEvent), put together for the applier.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/applier/applier_split.c
 *
 * An event over the BSON size limit comes as fragments, each with its own
 * resume token and a "splitEvent" {fragment: i, of: n}, the event's fields
 * (but _id) spread over them by size, smallest first
 * (document_source_change_stream_split_large_event.cpp).  A fragment may
 * end a batch, so what came of the event so far is kept in the stream
 * (AppStream.split_event) until its last fragment comes.  Only what
 * identifies the event is kept (its type, time, namespaces, document key,
 * transaction): the documents it carries (fullDocument, updateDescription)
 * could be most of 16 MB each, and the applier reads the fact from the
 * collection instead, as for an update whose fields it does not know.
 * While an event is in pieces the stream's position is not stored
 * (applier_position.c): a restart resumes before the event, never from a
 * fragment whose earlier fragments it would not have.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "applier/applier.h"
#include "core/convert.h"
#include "core/handle.h"
#include "core/mongoc_compat.h"

/*
 * Forget the split event whose fragments came so far.
 */
void
idx_applier_forget_split(AppStream *s)
{
	if (s->split_event)
		bson_destroy(s->split_event);
	s->split_event = NULL;
	s->split_next = 0;
}

/*
 * Take a fragment of a split event (its "splitEvent" is "split"): keep
 * what identifies the event, and once its last fragment came, return
 * that (palloc'd) as the event to apply; else NULL.  The documents it
 * carries (fullDocument, updateDescription) are left out: its fact is
 * read from the collection, as for an update.  A fragment without the
 * fragments before it cannot be placed: an ERROR, and the applier resumes
 * from its stored position, which is never inside a split event.
 */
const bson_t *
idx_applier_take_fragment(AppStream *s, const bson_t *event,
						  const bson_iter_t *split)
{
	bson_iter_t iter;
	int32		fragment = 0,
				of = 0;
	const bson_t *whole;

	if (bson_iter_recurse(split, &iter))
		while (bson_iter_next(&iter))
		{
			if (strcmp(bson_iter_key(&iter), "fragment") == 0 &&
				BSON_ITER_HOLDS_NUMBER(&iter))
				fragment = (int32) bson_iter_as_int64(&iter);
			else if (strcmp(bson_iter_key(&iter), "of") == 0 &&
					 BSON_ITER_HOLDS_NUMBER(&iter))
				of = (int32) bson_iter_as_int64(&iter);
		}
	if (fragment == 1)
	{
		idx_applier_forget_split(s);
		s->split_event = bson_new();
		s->split_next = 1;
	}
	if (s->split_event == NULL || fragment != s->split_next ||
		fragment > of)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_ERROR),
				 errmsg("the change stream of database \"%s\" on server \"%s\" returned fragment %d of %d of a split event out of order",
						s->database, applier.servername, fragment, of)));
	if (bson_iter_init(&iter, event))
		while (bson_iter_next(&iter))
		{
			const char *key = bson_iter_key(&iter);

			if (strcmp(key, "_id") != 0 && strcmp(key, "splitEvent") != 0 &&
				strcmp(key, "fullDocument") != 0 &&
				strcmp(key, "fullDocumentBeforeChange") != 0 &&
				strcmp(key, "updateDescription") != 0)
				idx_check_append(bson_append_iter(s->split_event, key, -1,
												  &iter));
		}
	s->split_next++;
	if (fragment < of)
		return NULL;
	whole = idx_bson_pcopy(s->split_event);
	idx_applier_forget_split(s);
	idx_cs_check_whole(&s->cs, whole);
	return whole;
}
