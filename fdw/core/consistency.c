/*-------------------------------------------------------------------------
 *
 * consistency.c
 *		  The names of the consistency modes of writes (IdxConsistency,
 *		  option.h).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/consistency.c
 *
 * A file of its own, which uses nothing of the module: every layer names a
 * mode in its messages, and none of them should depend on option.c's
 * callees for that.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "core/option.h"

/*
 * The name of consistency mode "mode", as the option "consistency" spells
 * it: the one spelling of the modes, which the option is parsed by
 * (option.c) and every message and EXPLAIN names them with.  The default is
 * no value of the option: it is described by what it becomes.
 */
const char *
idx_consistency_name(IdxConsistency mode)
{
	switch (mode)
	{
		case IDX_CONSISTENCY_TRANSACTION:
			return "transaction";
		case IDX_CONSISTENCY_ORDERED:
			return "ordered";
		case IDX_CONSISTENCY_EVENTUAL:
			return "eventual";
		case IDX_CONSISTENCY_DEFAULT:
			break;
	}
	return "transaction if supported, else ordered";
}
