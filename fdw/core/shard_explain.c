/*-------------------------------------------------------------------------
 *
 * shard_explain.c
 *		  EXPLAIN ANALYZE through mongos: the shards a scan's requests
 *		  reached.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/shard_explain.c
 *
 * mongos tells which shards a read goes to only in the reply of an
 * "explain" of it: a find, count or distinct names them in
 * queryPlanner.winningPlan.shards[].shardName (stage SINGLE_SHARD or
 * SHARD_MERGE), an aggregate of a sharded collection in the keys of its
 * "shards" document.  An aggregate of an unsharded collection is passed to
 * the primary shard, whose reply mongos returns as it is, naming no shard:
 * such an aggregate is explained once more as the find of its collection
 * with its leading $match stages as the filter, which mongos sends to the
 * same primary shard and names (aggregate_as_find).  Requests whose
 * shards still are not named are shown as not explained (never guessed).
 *
 * While a scan runs under EXPLAIN ANALYZE through mongos, the APM hook that
 * counts its round trips (connection.c) also tells this file of its reads,
 * through the function a log hands it when it starts, and they are noted
 * here, each distinct command (session and cluster-time fields left out)
 * once, with the number of times it was sent; getMores and killCursors go
 * where their cursor is and are not requests of their own.  When EXPLAIN prints the scan, each noted
 * command is explained once (verbosity "queryPlanner": mongos targets and
 * asks the shards for their plans, nothing runs), up to
 * SHARD_EXPLAIN_MAX_COMMANDS per scan.  These explains are not the scan's
 * round trips and are not counted in "Round Trips".  A failed explain
 * leaves its requests "not explained", with the error shown: a diagnostic
 * does not fail the user's query.
 *
 * The routing is the one mongos has when EXPLAIN prints, just after the
 * scan: a chunk that moved in between shows on its new shard.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/ilist.h"
#include "miscadmin.h"
#include "utils/memutils.h"

#include "core/connection.h"
#include "core/handle.h"
#include "core/shard_explain.h"

/* distinct commands a scan explains at most; later ones are counted only */
#define SHARD_EXPLAIN_MAX_COMMANDS 100

/* what a request read: the scan's collection or an index collection */
#define KIND_INDEX 0
#define KIND_COLLECTION 1

/*
 * One distinct command a scan sent, and what its explain said.
 */
typedef struct ShardCmd
{
	char	   *database;
	uint8	   *bytes;			/* the command, without session fields */
	uint32		len;
	int			kind;			/* KIND_* */
	uint64		sends;			/* times it was sent */
	bool		explained;		/* its explain was run */
	bool		known;			/* and named the shards */
	List	   *shards;			/* their names (char *) */
} ShardCmd;

/*
 * The reads of one scan.
 */
struct IdxShardLog
{
	dlist_node	node;			/* in active_logs while noting */
	uint64	   *counter;		/* the scan's round trip counter */
	mongoc_client_t *client;
	const mongoc_read_prefs_t *read_prefs;
	char	   *database;		/* the scan's collection */
	char	   *collection;
	MemoryContext cxt;
	MemoryContextCallback stop_cb;
	ShardCmd   *cmds;			/* SHARD_EXPLAIN_MAX_COMMANDS of them */
	int			ncmds;
	uint64		unnoted[2];		/* requests past the limit, per kind */
	char	   *error;			/* the first failed explain's message */
};

/* the logs noting now (scans under EXPLAIN ANALYZE through mongos) */
static dlist_head active_logs = DLIST_STATIC_INIT(active_logs);

static void note_counted_command(uint64 *counter,
								 const mongoc_apm_command_started_t *event);

/*
 * Stop noting: the memory context reset callback of the log's context.
 */
static void
stop_noting(void *arg)
{
	IdxShardLog *log = (IdxShardLog *) arg;

	dlist_delete(&log->node);
}

/*
 * Start noting the reads the scan counted by "counter" sends (see
 * shard_explain.h).  The log is allocated in the current memory context
 * (the scan's), and leaves the active list when that context is reset.
 */
IdxShardLog *
idx_shard_log_start(uint64 *counter, mongoc_client_t *client,
					const mongoc_read_prefs_t *read_prefs,
					const char *database, const char *collection)
{
	IdxShardLog *log = palloc0(sizeof(IdxShardLog));

	log->counter = counter;
	log->client = client;
	log->read_prefs = read_prefs;
	log->database = pstrdup(database);
	log->collection = pstrdup(collection);
	log->cxt = CurrentMemoryContext;
	log->cmds = palloc0(sizeof(ShardCmd) * SHARD_EXPLAIN_MAX_COMMANDS);
	log->stop_cb.func = stop_noting;
	log->stop_cb.arg = log;
	MemoryContextRegisterResetCallback(log->cxt, &log->stop_cb);
	dlist_push_head(&active_logs, &log->node);
	idx_note_counted_commands(note_counted_command);
	return log;
}

/*
 * Is "name" a read whose shards mongos's explain tells?
 */
static bool
is_explainable(const char *name)
{
	return strcmp(name, "find") == 0 || strcmp(name, "aggregate") == 0 ||
		strcmp(name, "count") == 0 || strcmp(name, "distinct") == 0;
}

/*
 * Is "key" a field of how a command was sent rather than of what it
 * asks: the session, transaction and cluster time, the read concern and
 * the fields libmongoc adds with a "$" ($db, $readPreference, ...)?  An
 * explain carries none of them.
 */
static bool
is_envelope_field(const char *key)
{
	return key[0] == '$' || strcmp(key, "lsid") == 0 ||
		strcmp(key, "txnNumber") == 0 ||
		strcmp(key, "startTransaction") == 0 ||
		strcmp(key, "autocommit") == 0 ||
		strcmp(key, "readConcern") == 0;
}

/*
 * The log of the scan "counter" counts for, or NULL.
 */
static IdxShardLog *
log_of_counter(uint64 *counter)
{
	dlist_iter	iter;

	dlist_foreach(iter, &active_logs)
	{
		IdxShardLog *log = dlist_container(IdxShardLog, node, iter.cur);

		if (log->counter == counter)
			return log;
	}
	return NULL;
}

/*
 * Keep a new command of "kind" ("len" bytes at "data", run on "database")
 * sent once, if there is room and memory; false if not.  Raises no error.
 */
static bool
keep_command(IdxShardLog *log, const char *database, const uint8 *data,
			 uint32 len, int kind)
{
	ShardCmd   *cmd;
	uint8	   *bytes;
	char	   *db;

	if (log->ncmds >= SHARD_EXPLAIN_MAX_COMMANDS)
		return false;
	bytes = MemoryContextAllocExtended(log->cxt, len, MCXT_ALLOC_NO_OOM);
	db = MemoryContextAllocExtended(log->cxt, strlen(database) + 1,
									MCXT_ALLOC_NO_OOM);
	if (bytes == NULL || db == NULL)
		return false;
	memcpy(bytes, data, len);
	strcpy(db, database);
	cmd = &log->cmds[log->ncmds++];
	cmd->bytes = bytes;
	cmd->database = db;
	cmd->len = len;
	cmd->kind = kind;
	cmd->sends = 1;
	return true;
}

/*
 * Note one request: a command sent before adds a send, a new one is kept
 * while there is room.  Memory is asked without raising an error; a
 * request that cannot be kept is counted as not explained.
 */
static void
note_command(IdxShardLog *log, const char *database, const bson_t *sent)
{
	bson_t		kept = BSON_INITIALIZER;
	bson_iter_t iter;
	const uint8 *data;
	const char *ns = NULL;
	bool		first = true;
	int			kind;
	ShardCmd   *cmd;
	int			i;

	if (!bson_iter_init(&iter, sent))
		return;
	while (bson_iter_next(&iter))
	{
		const char *key = bson_iter_key(&iter);

		/* the command's name field holds its collection */
		if (first && BSON_ITER_HOLDS_UTF8(&iter))
			ns = bson_iter_utf8(&iter, NULL);
		first = false;
		if (!is_envelope_field(key))
			bson_append_iter(&kept, key, -1, &iter);
	}
	kind = (ns != NULL && strcmp(ns, log->collection) == 0 &&
			strcmp(database, log->database) == 0) ?
		KIND_COLLECTION : KIND_INDEX;
	data = bson_get_data(&kept);

	for (i = 0; i < log->ncmds; i++)
	{
		cmd = &log->cmds[i];
		if (cmd->len == kept.len && strcmp(cmd->database, database) == 0 &&
			memcmp(cmd->bytes, data, kept.len) == 0)
		{
			cmd->sends++;
			bson_destroy(&kept);
			return;
		}
	}

	if (!keep_command(log, database, data, kept.len, kind))
		log->unnoted[kind]++;
	bson_destroy(&kept);
}

/*
 * The APM hook's part (idx_note_counted_commands()): a find, aggregate,
 * count or distinct sent while a noting scan's counter counts is noted in
 * its log.  Cheap when no scan notes (the list is empty); raises no error,
 * as it runs inside libmongoc.
 */
static void
note_counted_command(uint64 *counter,
					 const mongoc_apm_command_started_t *event)
{
	IdxShardLog *log;

	if (dlist_is_empty(&active_logs))
		return;
	log = log_of_counter(counter);
	if (log == NULL ||
		!is_explainable(mongoc_apm_command_started_get_command_name(event)))
		return;
	note_command(log, mongoc_apm_command_started_get_database_name(event),
				 mongoc_apm_command_started_get_command(event));
}

/*
 * Add the shard "name" to "cmd" unless it is there.
 */
static void
add_shard(ShardCmd *cmd, const char *name)
{
	ListCell   *lc;

	foreach(lc, cmd->shards)
	{
		if (strcmp((char *) lfirst(lc), name) == 0)
			return;
	}
	cmd->shards = lappend(cmd->shards, pstrdup(name));
}

/*
 * Read the shards an explain reply of mongos names into "cmd": those of
 * queryPlanner.winningPlan.shards (find, count, distinct) or the keys of
 * "shards" (a sharded aggregate).  False if it names none in either place
 * (an aggregate passed to one shard, or not a mongos reply).
 */
static bool
read_shards(const bson_t *reply, ShardCmd *cmd)
{
	bson_iter_t iter;
	bson_iter_t child;

	if (bson_iter_init(&iter, reply) &&
		bson_iter_find_descendant(&iter, "queryPlanner.winningPlan.shards",
								  &child) &&
		BSON_ITER_HOLDS_ARRAY(&child) && bson_iter_recurse(&child, &iter))
	{
		while (bson_iter_next(&iter))
		{
			bson_iter_t name;

			if (!BSON_ITER_HOLDS_DOCUMENT(&iter) ||
				!bson_iter_recurse(&iter, &name) ||
				!bson_iter_find(&name, "shardName") ||
				!BSON_ITER_HOLDS_UTF8(&name))
				return false;
			add_shard(cmd, bson_iter_utf8(&name, NULL));
		}
		return cmd->shards != NIL;
	}
	if (bson_iter_init_find(&iter, reply, "shards") &&
		BSON_ITER_HOLDS_DOCUMENT(&iter) && bson_iter_recurse(&iter, &child))
	{
		while (bson_iter_next(&child))
			add_shard(cmd, bson_iter_key(&child));
		return cmd->shards != NIL;
	}
	return false;
}

/*
 * Explain "sent" (verbosity queryPlanner) on "database" through the scan's
 * mongos and read the shards its reply names into "cmd".  True if it named
 * some; false if it named none (*message left NULL) or failed (*message
 * the error, palloc'd).  The reply is owned by the current memory context
 * while it is read, so an error in between frees it.
 */
static bool
explain_shards(IdxShardLog *log, const char *database, const bson_t *sent,
			   ShardCmd *cmd, char **message)
{
	bson_t	   *explain = bson_new();
	IdxHandle  *owned = idx_own_bson(explain);
	bson_t		stack_reply;
	bson_t	   *reply;
	IdxHandle  *owned_reply;
	bson_error_t error;
	bool		ok;
	bool		named;

	*message = NULL;
	if (!BSON_APPEND_DOCUMENT(explain, "explain", sent) ||
		!BSON_APPEND_UTF8(explain, "verbosity", "queryPlanner"))
	{
		idx_release(owned);
		*message = pstrdup("the explain command could not be built");
		return false;
	}
	ok = mongoc_client_command_simple(log->client, database, explain,
									  log->read_prefs, &stack_reply, &error);
	reply = bson_copy(&stack_reply);
	bson_destroy(&stack_reply);
	owned_reply = idx_own_bson(reply);
	idx_release(owned);
	if (!ok)
	{
		*message = pstrdup(error.message);
		idx_release(owned_reply);
		return false;
	}
	cmd->shards = NIL;
	named = read_shards(reply, cmd);
	idx_release(owned_reply);
	return named;
}

/*
 * Is "sent" an aggregate (its first field, the command's name)?
 */
static bool
is_aggregate(const bson_t *sent)
{
	bson_iter_t iter;

	return bson_iter_init(&iter, sent) && bson_iter_next(&iter) &&
		strcmp(bson_iter_key(&iter), "aggregate") == 0 &&
		BSON_ITER_HOLDS_UTF8(&iter);
}

/*
 * Append the filter of an aggregate's leading $match stages to "find" as
 * its "filter": the one stage's document, several under $and, none as {}.
 * These stages are what mongos targets an aggregate by.  False if an
 * append fails.
 */
static bool
append_leading_match(bson_iter_t *pipeline, bson_t *find)
{
	bson_t		matches = BSON_INITIALIZER;
	bson_t		and;
	bson_iter_t stage;
	bson_iter_t match;
	int			n = 0;
	bool		ok = true;

	while (ok && bson_iter_next(pipeline) &&
		   BSON_ITER_HOLDS_DOCUMENT(pipeline) &&
		   bson_iter_recurse(pipeline, &stage) && bson_iter_next(&stage) &&
		   strcmp(bson_iter_key(&stage), "$match") == 0 &&
		   BSON_ITER_HOLDS_DOCUMENT(&stage))
	{
		const char *key;
		char		keybuf[16];

		bson_uint32_to_string(n++, &key, keybuf, sizeof(keybuf));
		match = stage;
		ok = bson_append_iter(&matches, key, -1, &stage);
	}
	if (ok && n == 1)
	{
		bson_t		one;
		const uint8 *data;
		uint32		len;

		bson_iter_document(&match, &len, &data);
		ok = bson_init_static(&one, data, len) &&
			BSON_APPEND_DOCUMENT(find, "filter", &one);
	}
	else if (ok)
	{
		ok = BSON_APPEND_DOCUMENT_BEGIN(find, "filter", &and) &&
			(n == 0 || BSON_APPEND_ARRAY(&and, "$and", &matches)) &&
			bson_append_document_end(find, &and);
	}
	bson_destroy(&matches);
	return ok;
}

/*
 * Build into "find" the find an aggregate of an unsharded collection is
 * explained by: of the same collection, with the aggregate's leading
 * $match stages as its filter and the aggregate's collation.  False if it
 * cannot be built.  mongos passes such an aggregate whole to the
 * database's primary shard and returns that shard's own explain, which
 * names no shard; a find of the same collection and filter goes to the
 * same primary shard, and mongos's explain of it names that shard.  (Of a
 * sharded collection mongos always names an aggregate's shards, so this is
 * never asked for one.)
 */
static bool
aggregate_as_find(const bson_t *sent, bson_t *find)
{
	bson_iter_t iter;
	bson_iter_t pipeline;
	bool		ok;

	ok = bson_iter_init(&iter, sent) && bson_iter_next(&iter) &&
		BSON_APPEND_UTF8(find, "find", bson_iter_utf8(&iter, NULL));
	if (ok && bson_iter_init_find(&iter, sent, "pipeline") &&
		BSON_ITER_HOLDS_ARRAY(&iter) && bson_iter_recurse(&iter, &pipeline))
		ok = append_leading_match(&pipeline, find);
	else
		ok = false;
	if (ok && bson_iter_init_find(&iter, sent, "collation"))
		ok = bson_append_iter(find, "collation", -1, &iter);
	return ok;
}

/*
 * Explain one command through the scan's mongos; an aggregate whose explain
 * names no shard through the find it is explained by (aggregate_as_find).
 * A failure, or a reply that names no shard, leaves the command not known;
 * the first message is kept for EXPLAIN.  Never an ERROR: the scan has
 * already run and the rows and counters EXPLAIN ANALYZE shows are right,
 * so a failed diagnostic (a mongos that refuses explain, a timeout) is
 * shown as such rather than hiding them.
 */
static void
explain_command(IdxShardLog *log, ShardCmd *cmd)
{
	bson_t		sent;
	char	   *message = NULL;

	cmd->explained = true;
	if (!bson_init_static(&sent, cmd->bytes, cmd->len))
		return;
	cmd->known = explain_shards(log, cmd->database, &sent, cmd, &message);
	if (!cmd->known && message == NULL && is_aggregate(&sent))
	{
		bson_t	   *find = bson_new();
		IdxHandle  *owned = idx_own_bson(find);

		if (aggregate_as_find(&sent, find))
			cmd->known = explain_shards(log, cmd->database, find, cmd,
										&message);
		idx_release(owned);
	}
	if (!cmd->known && log->error == NULL)
		log->error = message ? message :
			pstrdup("the explain reply names no shard");
}

/*
 * A shard and the requests of one kind that reached it.
 */
typedef struct ShardCount
{
	const char *name;
	uint64		requests;
} ShardCount;

/*
 * Order ShardCounts by name.
 */
static int
shard_count_cmp(const ListCell *a, const ListCell *b)
{
	return strcmp(((ShardCount *) lfirst(a))->name,
				  ((ShardCount *) lfirst(b))->name);
}

/*
 * Count the requests of "kind" per shard; those whose shards are not known
 * go to *unknown.
 */
static List *
count_shards(IdxShardLog *log, int kind, uint64 *unknown)
{
	List	   *counts = NIL;
	int			i;

	*unknown = log->unnoted[kind];
	for (i = 0; i < log->ncmds; i++)
	{
		ShardCmd   *cmd = &log->cmds[i];
		ListCell   *lc;
		ListCell   *lc2;

		if (cmd->kind != kind)
			continue;
		if (!cmd->known)
		{
			*unknown += cmd->sends;
			continue;
		}
		foreach(lc, cmd->shards)
		{
			const char *name = lfirst(lc);
			ShardCount *count = NULL;

			foreach(lc2, counts)
			{
				if (strcmp(((ShardCount *) lfirst(lc2))->name, name) == 0)
					count = lfirst(lc2);
			}
			if (count == NULL)
			{
				count = palloc0(sizeof(ShardCount));
				count->name = name;
				counts = lappend(counts, count);
			}
			count->requests += cmd->sends;
		}
	}
	list_sort(counts, shard_count_cmp);
	return counts;
}

/*
 * "N request(s)".
 */
static char *
requests_text(uint64 n)
{
	return psprintf(n == 1 ? "%llu request" : "%llu requests",
					(unsigned long long) n);
}

/*
 * Show the shards of one kind's requests: in text one line,
 * "shard0 (3 requests), shard1 (1 request)"; in the other formats a list
 * of {"Shard Name", "Requests"}; and the requests not explained, if any.
 */
static void
show_kind(IdxShardLog *log, int kind, ExplainState *es)
{
	const char *label = kind == KIND_INDEX ?
		"Index Collection Shards" : "Collection Shards";
	const char *unknown_label = kind == KIND_INDEX ?
		"Index Collection Requests Not Explained" :
		"Collection Requests Not Explained";
	uint64		unknown;
	List	   *counts = count_shards(log, kind, &unknown);
	ListCell   *lc;

	if (counts == NIL && unknown == 0)
		return;
	if (es->format == EXPLAIN_FORMAT_TEXT)
	{
		StringInfoData buf;

		initStringInfo(&buf);
		foreach(lc, counts)
		{
			ShardCount *count = lfirst(lc);

			appendStringInfo(&buf, "%s%s (%s)", buf.len ? ", " : "",
							 count->name, requests_text(count->requests));
		}
		if (unknown > 0)
			appendStringInfo(&buf, "%s%s not explained", buf.len ? "; " : "",
							 requests_text(unknown));
		ExplainPropertyText(label, buf.data, es);
		return;
	}
	ExplainOpenGroup(label, label, false, es);
	foreach(lc, counts)
	{
		ShardCount *count = lfirst(lc);

		ExplainOpenGroup("Shard", NULL, true, es);
		ExplainPropertyText("Shard Name", count->name, es);
		ExplainPropertyUInteger("Requests", NULL, count->requests, es);
		ExplainCloseGroup("Shard", NULL, true, es);
	}
	ExplainCloseGroup(label, label, false, es);
	if (unknown > 0)
		ExplainPropertyUInteger(unknown_label, NULL, unknown, es);
}

/*
 * EXPLAIN ANALYZE of a scan through mongos: explain the commands not yet
 * explained (outside the scan's round trip counter, in the log's memory
 * context), then show each kind's shards and the first explain error.
 */
void
idx_shard_log_explain(IdxShardLog *log, ExplainState *es)
{
	uint64	   *previous = idx_count_round_trips(NULL);
	MemoryContext oldcxt = MemoryContextSwitchTo(log->cxt);
	int			i;

	/* explain each command once, should EXPLAIN print the scan twice */
	for (i = 0; i < log->ncmds; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (!log->cmds[i].explained)
			explain_command(log, &log->cmds[i]);
	}
	MemoryContextSwitchTo(oldcxt);
	idx_count_round_trips(previous);
	show_kind(log, KIND_INDEX, es);
	show_kind(log, KIND_COLLECTION, es);
	if (log->error != NULL)
		ExplainPropertyText("Shard Explain Error", log->error, es);
}
