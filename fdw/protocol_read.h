/*-------------------------------------------------------------------------
 *
 * protocol_read.h
 *		  How the index-table protocol's own reads are sent: to the primary,
 *		  and under the collection's default collation where that lets an
 *		  _id lookup use the _id index.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_PROTOCOL_READ_H
#define IDXTABLE_PROTOCOL_READ_H

#include <mongoc/mongoc.h>

#include "nodes/execnodes.h"

/*
 * The read preference of reads whose answer decides a write (claims,
 * ownership markers, verify/repair lookups, fact fetches before a write or
 * an undo): primary, whatever the URI's readPreference says.  Owned by this
 * module; pass it to mongoc_collection_find_with_opts().
 */
extern const mongoc_read_prefs_t *idx_primary_read_prefs(void);

/*
 * The read preference of a foreign scan: primary when its rows feed a
 * write (the scan of an UPDATE/DELETE target, or of a table locked FOR
 * UPDATE/SHARE), else NULL (the URI's readPreference).
 */
extern const mongoc_read_prefs_t *idx_scan_read_prefs(ForeignScanState *node);

#endif							/* IDXTABLE_PROTOCOL_READ_H */
