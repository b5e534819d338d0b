/*-------------------------------------------------------------------------
 *
 * reply_check.c
 *		  Validation of MongoDB wire-protocol replies before libmongoc
 *		  parses them.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/reply_check.c
 *
 * libmongoc 1.23 trusts the framing of replies: _mongoc_rpc_scatter does
 * not check OP_MSG section lengths against the message (a short one makes
 * it read and write out of bounds), its cursor asserts that nested
 * documents are well-formed, OP_COMPRESSED is decompressed unchecked, and
 * a handshake list of names holding non-strings reaches strcasecmp() as
 * NULL.  stream.c reads each reply whole and passes it here first: the
 * framing of OP_MSG and OP_REPLY, every BSON document (nested ones
 * included) and the few fields libmongoc reads without care.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "core/mongoc_compat.h"
#include "core/reply_check.h"

#define OP_REPLY		1
#define OP_COMPRESSED	2012
#define OP_MSG			2013

/*
 * The offset, in the bytes after a message's length prefix (what is
 * checked here), of byte "off" of the message.
 */
#define AFTER_LENGTH(off)	((off) - 4)

/* The deepest nesting of documents accepted (MongoDB's own limit) */
#define IDX_MAX_DEPTH		200

/*
 * What a document being walked is, for the checks of the first document of
 * a reply that ride on the same walk (see shape_check()).
 */
typedef enum WalkRole
{
	WALK_PLAIN,					/* no check beyond the framing */
	WALK_BODY,					/* the first document */
	WALK_CURSOR,				/* its first "cursor" field, a document */
	WALK_BATCH,					/* a firstBatch or nextBatch array in it */
	WALK_FRAMED					/* a batch document left to its reader */
} WalkRole;

/*
 * While idx_check_reply() runs with "defer_batch" set: the documents of a
 * cursor batch are checked only as bson_init_static() checks them (see
 * idx_check_reply()).
 */
static bool defer_batch_documents = false;

static const char *check_reply(const uint8 *rest, size_t len);
static bool document_ok(const uint8 *d, uint32 len, int depth, WalkRole role,
						const char **shape);

/*
 * A little-endian int32 of the wire protocol (the header's fields, and
 * section and document lengths).
 */
int32
idx_wire_int32(const uint8 *p)
{
	uint32		v;

	memcpy(&v, p, 4);
	return (int32) BSON_UINT32_FROM_LE(v);
}

/*
 * The cursor batch checks of the first document, done on the element of
 * type "type" and key "key" of a document of role "role" while the
 * framing is walked: a cursor batch element that is not a document
 * silently ends the batch in libmongoc.  Records in "*shape" the first
 * problem met (the walk meets them in the order a separate walk of the
 * first "cursor" field would) and returns the role of the element's own
 * contents.
 */
static WalkRole
shape_check(uint8 type, const char *key, WalkRole role, bool *seen_cursor,
			const char **shape)
{
	if (role == WALK_PLAIN)
		return WALK_PLAIN;
	if (role == WALK_BATCH)
	{
		if (type != BSON_TYPE_DOCUMENT && *shape == NULL)
			*shape = gettext_noop("A cursor batch holds a value that is not a document.");
		return defer_batch_documents ? WALK_FRAMED : WALK_PLAIN;
	}
	if (role == WALK_BODY)
	{
		if (*seen_cursor || strcmp(key, "cursor") != 0)
			return WALK_PLAIN;
		*seen_cursor = true;
		return type == BSON_TYPE_DOCUMENT ? WALK_CURSOR : WALK_PLAIN;
	}
	if (strcmp(key, "firstBatch") != 0 && strcmp(key, "nextBatch") != 0)
		return WALK_PLAIN;
	if (type == BSON_TYPE_ARRAY)
		return WALK_BATCH;
	if (*shape == NULL)
		*shape = gettext_noop("A cursor batch is not an array.");
	return WALK_PLAIN;
}

/*
 * A little-endian uint32 of a BSON document.
 */
static uint32
read_uint32(const uint8 *p)
{
	uint32		v;

	memcpy(&v, p, 4);
	return BSON_UINT32_FROM_LE(v);
}

/*
 * Where the value at "o" of type "type" ends, in a document of "len"
 * bytes at "d" (o <= len), or 0 if it is malformed; "*sub" and "*sublen"
 * receive the document a document, array or code-with-scope value holds.
 * Exactly the acceptance of libbson 1.23's bson_iter_next(), with the
 * same unsigned arithmetic; the caller checks that the end is < len.
 * Always inline, as the walk below runs it on every element of every reply.
 */
static pg_attribute_always_inline uint32
value_end(const uint8 *d, uint32 len, uint32 o, uint8 type,
		  const uint8 **sub, uint32 *sublen)
{
	uint32		l;
	uint32		l2;
	const uint8 *nul;

	switch (type)
	{
		case BSON_TYPE_DATE_TIME:
		case BSON_TYPE_DOUBLE:
		case BSON_TYPE_INT64:
		case BSON_TYPE_TIMESTAMP:
			return o + 8;
		case BSON_TYPE_CODE:
		case BSON_TYPE_SYMBOL:
		case BSON_TYPE_UTF8:
			if (o + 4 >= len)
				return 0;
			l = read_uint32(d + o);
			if (l > len - (o + 4) || l == 0 || o + 4 + l >= len ||
				d[o + 4 + l - 1] != '\0')
				return 0;
			return o + 4 + l;
		case BSON_TYPE_BINARY:
			if (o >= len - 4)
				return 0;
			l = read_uint32(d + o);
			if (l >= len - o - 4)
				return 0;
			if (d[o + 4] == BSON_SUBTYPE_BINARY_DEPRECATED &&
				(l < 4 || read_uint32(d + o + 5) + 4 != l))
				return 0;
			return o + 5 + l;
		case BSON_TYPE_ARRAY:
		case BSON_TYPE_DOCUMENT:
			if (o >= len - 4)
				return 0;
			l = read_uint32(d + o);
			if (l > len || l > len - o)
				return 0;
			*sub = d + o;
			*sublen = l;
			return o + l;
		case BSON_TYPE_OID:
			return o + 12;
		case BSON_TYPE_BOOL:
			if (o >= len || (d[o] != 0 && d[o] != 1))
				return 0;
			return o + 1;
		case BSON_TYPE_REGEX:
			/* two cstrings, both within the document */
			nul = memchr(d + o, 0, len - o);
			if (nul == NULL)
				return 0;
			o = nul - d + 1;
			nul = memchr(d + o, 0, len - o);
			return nul == NULL ? 0 : (uint32) (nul - d) + 1;
		case BSON_TYPE_DBPOINTER:
			if (o >= len - 4)
				return 0;
			l = read_uint32(d + o);
			if (l == 0 || l > len - o - 4 || d[o + l + 3] != '\0')
				return 0;
			return o + 4 + l + 12;
		case BSON_TYPE_CODEWSCOPE:
			if (len < 19 || o >= len - 14)
				return 0;
			l = read_uint32(d + o);
			if (l < 14 || l >= len - o || o + l >= len)
				return 0;
			l2 = read_uint32(d + o + 4);
			if (l2 == 0 || l2 >= len - o - 4 - 4 || o + 4 + 4 + l2 + 4 >= o + l ||
				o + 4 + 4 + l2 + read_uint32(d + o + 8 + l2) != o + l)
				return 0;
			*sub = d + o + 8 + l2;
			*sublen = read_uint32(d + o + 8 + l2);
			return o + l;
		case BSON_TYPE_INT32:
			return o + 4;
		case BSON_TYPE_DECIMAL128:
			return o + 16;
		case BSON_TYPE_MAXKEY:
		case BSON_TYPE_MINKEY:
		case BSON_TYPE_NULL:
		case BSON_TYPE_UNDEFINED:
			return o;
		default:				/* unknown types and a misplaced end */
			return 0;
	}
}

/*
 * value_end() for the element walk of the scan's row conversion
 * (convert.c), so that it accepts exactly what libbson and the walk above
 * accept.
 */
uint32
idx_bson_value_end(const uint8 *d, uint32 len, uint32 o, uint8 type,
				   const uint8 **sub, uint32 *sublen)
{
	return value_end(d, len, o, type, sub, sublen);
}

/*
 * The NUL ending the key that starts at "p", within a document whose
 * trailing NUL has been checked (so the scan stops there at the latest).
 * A plain loop: keys are short, and memchr()'s call costs more than the
 * scan on the many keys of a cursor batch.
 */
static inline const uint8 *
key_nul(const uint8 *p)
{
	while (*p != '\0')
		p++;
	return p;
}

/*
 * document_ok()'s walk of a cursor batch array (role WALK_BATCH, at
 * "depth") whose documents are left to their reader: the same acceptance
 * of each element, and for a document only the checks of
 * bson_init_static() (a length of at least 5, read from where the length
 * is, and a trailing NUL), which is all that document_ok() checks of a
 * WALK_FRAMED document; in one tight loop, since a batch has a document
 * per row.  A value that is not a document is walked and reported as
 * shape_check() does.
 */
static bool
deferred_batch_ok(const uint8 *d, uint32 len, int depth, const char **shape)
{
	uint32		off = 4;

	while (off < len - 1)
	{
		uint8		type = d[off];
		uint32		o = (uint32) (key_nul(d + off + 1) - d) + 1;
		uint32		l;

		if (type == BSON_TYPE_DOCUMENT)
		{
			/* value_end()'s checks, then the end's and the document's own */
			if (o >= len - 4)
				return false;
			l = read_uint32(d + o);
			if (l > len - o || o + l >= len || l < 5 || d[o + l - 1] != '\0')
				return false;
			off = o + l;
		}
		else
		{
			const uint8 *sub = NULL;
			uint32		sublen = 0;
			uint32		end = value_end(d, len, o, type, &sub, &sublen);

			if (end == 0 || end >= len)
				return false;
			if (*shape == NULL)
				*shape = gettext_noop("A cursor batch holds a value that is not a document.");
			if (sub != NULL &&
				!document_ok(sub, sublen, depth + 1, WALK_FRAMED, shape))
				return false;
			off = end;
		}
	}
	return true;
}

/*
 * Is the document of "len" bytes at "d" well-formed throughout: length
 * prefix and trailing NUL, every element inside it (as libbson's
 * bson_iter_next() accepts them), and every nested document, array and
 * code-with-scope scope the same?  bson_validate() is not enough: it skips
 * a nested document whose trailing byte is wrong, which libmongoc's cursor
 * then asserts on.  Walked over the bytes rather than with bson_iter,
 * which costs several times more per element.  Depth is bounded as
 * MongoDB bounds it.  The same walk makes the cursor batch checks of
 * shape_check() on a document of a role other than WALK_PLAIN, so that a
 * batch is walked once.
 */
static bool
document_ok(const uint8 *d, uint32 len, int depth, WalkRole role,
			const char **shape)
{
	uint32		off = 4;
	bool		seen_cursor = false;

	/* as bson_init_static() */
	if (depth > IDX_MAX_DEPTH || len < 5 || len > INT_MAX ||
		read_uint32(d) != len || d[len - 1] != '\0')
		return false;
	if (role == WALK_FRAMED)
		return true;
	if (role == WALK_BATCH && defer_batch_documents)
		return deferred_batch_ok(d, len, depth, shape);
	while (off < len - 1)
	{
		uint8		type = d[off];
		const uint8 *key_end = key_nul(d + off + 1);
		const uint8 *sub = NULL;
		uint32		sublen = 0;
		uint32		end;
		WalkRole	subrole;

		/* the trailing NUL ends every key */
		end = value_end(d, len, (uint32) (key_end - d) + 1, type, &sub,
						&sublen);
		if (end == 0 || end >= len)
			return false;
		subrole = role == WALK_PLAIN ? WALK_PLAIN :
			shape_check(type, (const char *) d + off + 1, role,
						&seen_cursor, shape);
		if (sub != NULL && !document_ok(sub, sublen, depth + 1, subrole, shape))
			return false;
		off = end;
	}
	return true;
}

/*
 * Is the "len"-byte document at "d", nested "depth" deep in its reply,
 * well-formed throughout, as document_ok() checks every document of a
 * reply?  For the readers of cursor batch documents whose replies were
 * checked with "defer_batch" (idx_check_reply()).
 */
bool
idx_bson_document_ok(const uint8 *d, uint32 len, int depth)
{
	const char *ignored = NULL;

	return document_ok(d, len, depth, WALK_PLAIN, &ignored);
}

/*
 * Is "len" bytes at "data" one well-formed BSON document?  With "shape"
 * (the first document of a reply), also record in it the first problem of
 * its cursor batches, or NULL.
 */
static bool
bytes_ok(const uint8 *data, size_t len, const char **shape)
{
	const char *ignored = NULL;

	if (shape)
		*shape = NULL;
	return len <= INT_MAX &&
		document_ok(data, (uint32) len, 0, shape ? WALK_BODY : WALK_PLAIN,
					shape ? shape : &ignored);
}
/*
 * Are all the values of array or document "iter" strings?
 */
static bool
all_strings(const bson_iter_t *iter)
{
	bson_iter_t sub;

	if (!bson_iter_recurse(iter, &sub))
		return false;
	while (bson_iter_next(&sub))
		if (!BSON_ITER_HOLDS_UTF8(&sub))
			return false;
	return true;
}

/*
 * Checks of handshake fields that libmongoc reads without care: lists of
 * names holding anything but strings reach strcasecmp() as NULL (fields
 * libmongoc type-checks itself are left to it).
 */
static const char *
check_handshake_fields(const bson_t *doc)
{
	static const char *const lists[] = {"compression", "hosts", "passives",
	"arbiters"};
	bson_iter_t iter;
	int			i;

	for (i = 0; i < lengthof(lists); i++)
		if (bson_iter_init_find(&iter, doc, lists[i]) &&
			(!BSON_ITER_HOLDS_ARRAY(&iter) || !all_strings(&iter)))
			return gettext_noop("A list of names in the handshake reply is not an array of strings.");
	if (bson_iter_init_find(&iter, doc, "tags") &&
		(!BSON_ITER_HOLDS_DOCUMENT(&iter) || !all_strings(&iter)))
		return gettext_noop("The \"tags\" field of the handshake reply is not a document of strings.");
	return NULL;
}

/*
 * Checks of the first document that libmongoc reads without care, once
 * its framing has been checked: the handshake fields above, then the
 * cursor batch problem "shape" found while walking it, if any.
 */
static const char *
check_first_document(const uint8 *data, size_t len, const char *shape)
{
	bson_t		doc;
	const char *reason;

	if (!bson_init_static(&doc, data, len))
		return gettext_noop("A document's length does not match its contents.");
	if ((reason = check_handshake_fields(&doc)) != NULL)
		return reason;
	return shape;
}

/*
 * Check "count" documents (-1: any number) filling exactly the "len" bytes
 * at "p"; the first one also with check_first_document() if "first".
 */
static const char *
check_documents(const uint8 *p, size_t len, int64 count, bool first)
{
	int64		n = 0;
	const char *shape = NULL;

	while (len > 0)
	{
		int32		doclen;

		if (len < 4)
			return gettext_noop("A document is cut off by the end of its section.");
		doclen = idx_wire_int32(p);
		if (doclen < 5 || (size_t) doclen > len)
			return gettext_noop("A document's length exceeds its section.");
		if (!bytes_ok(p, doclen, (first && n == 0) ? &shape : NULL))
			return gettext_noop("A document is corrupt.");
		if (first && n == 0)
		{
			const char *reason = check_first_document(p, doclen, shape);

			if (reason)
				return reason;
		}
		p += doclen, len -= doclen, n++;
	}
	if (count >= 0 && n != count)
		return gettext_noop("The number of documents does not match the reply's header.");
	return NULL;
}

/*
 * Check the sections of an OP_MSG: a body (kind 0) first, at most one
 * document sequence (kind 1), each inside the message, which they fill.
 * "rest" is the message after its length prefix, "len" the whole
 * message's length; positions below are in "rest".
 */
static const char *
check_op_msg(const uint8 *rest, size_t len)
{
	uint32		flags;
	size_t		pos = AFTER_LENGTH(20);
	int			nsections = 0;

	if (len < 21)
		return gettext_noop("An OP_MSG reply is too short to hold a section.");
	len = AFTER_LENGTH(len);
	flags = (uint32) idx_wire_int32(rest + AFTER_LENGTH(16));
	if (flags & 0xFFFF)
		return gettext_noop("An OP_MSG reply sets flag bits the client does not accept (checksum, moreToCome or reserved bits).");
	while (pos < len)
	{
		uint8		kind = rest[pos++];
		int32		size;
		const char *reason;

		if (nsections == 2)
			return gettext_noop("An OP_MSG reply has more than two sections.");
		if (len - pos < 4)
			return gettext_noop("An OP_MSG section is cut off by the end of the message.");
		size = idx_wire_int32(rest + pos);
		if (size < 5 || (size_t) size > len - pos)
			return gettext_noop("An OP_MSG section's length does not fit the message.");
		if (kind == 0)
		{
			if (nsections != 0)
				return gettext_noop("An OP_MSG reply has more than one body section.");
			reason = check_documents(rest + pos, size, 1, true);
		}
		else if (kind == 1)
		{
			const uint8 *nul = memchr(rest + pos + 4, 0, size - 4);

			if (nsections == 0)
				return gettext_noop("An OP_MSG reply does not start with a body section.");
			if (nul == NULL)
				return gettext_noop("An OP_MSG document sequence's identifier is not terminated.");
			reason = check_documents(nul + 1, rest + pos + size - (nul + 1),
									 -1, false);
		}
		else
			return gettext_noop("An OP_MSG section is of an unknown kind.");
		if (reason)
			return reason;
		pos += size;
		nsections++;
	}
	if (nsections == 0)
		return gettext_noop("An OP_MSG reply has no section.");
	return NULL;
}

/*
 * Check a whole reply of "len" bytes, given as the bytes after its length
 * prefix ("rest"), so that stream.c can check a reply read straight into
 * libmongoc's buffer behind the prefix it served first; NULL if it is
 * well-formed, else why not (a sentence marked for translation).  With
 * "defer_batch", each document of a cursor batch is checked only as far
 * as libmongoc's cursor needs (its length and trailing NUL, which
 * bson_init_static() asserts): its reader promises to check the rest with
 * idx_bson_document_ok(), or in the same walk that converts it, before
 * anything reads it.
 */
const char *
idx_check_reply(const uint8 *rest, size_t len, bool defer_batch)
{
	const char *reason;

	defer_batch_documents = defer_batch;
	reason = check_reply(rest, len);
	defer_batch_documents = false;
	return reason;
}

/*
 * idx_check_reply() with defer_batch_documents set.
 */
static const char *
check_reply(const uint8 *rest, size_t len)
{
	int32		opcode = idx_wire_int32(rest + AFTER_LENGTH(12));

	if (opcode == OP_MSG)
		return check_op_msg(rest, len);
	if (opcode == OP_REPLY)
	{
		int32		nreturned;

		if (len < 36)
			return gettext_noop("An OP_REPLY reply is shorter than its header.");
		nreturned = idx_wire_int32(rest + AFTER_LENGTH(32));
		if (nreturned < 0)
			return gettext_noop("An OP_REPLY reply has a negative document count.");
		return check_documents(rest + AFTER_LENGTH(36), len - 36, nreturned,
							   true);
	}
	if (opcode == OP_COMPRESSED)
		return gettext_noop("The reply is compressed (OP_COMPRESSED), which the client did not ask for.");
	return gettext_noop("The reply has an opcode the client does not accept.");
}
