/*-------------------------------------------------------------------------
 *
 * launcher.h
 *		  The processes of the change-stream applier (launcher.c): their
 *		  settings, and the registration of the launcher, which is all the
 *		  FDW proper asks of fdw/applier (from _PG_init).
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/applier/launcher.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_LAUNCHER_H
#define IDXTABLE_LAUNCHER_H

/* bgw_type of each kind of worker, also its application_name */
#define IDX_LAUNCHER_TYPE		"idxtable_fdw launcher"
#define IDX_DBWORKER_TYPE		"idxtable_fdw database worker"
#define IDX_APPLIER_TYPE		"idxtable_fdw applier"

/* idxtable.launcher_naptime, in seconds */
extern int	idx_launcher_naptime;

/* idxtable.applier_batch_delay, in milliseconds */
extern int	idx_applier_batch_delay;

/* The two settings above, defined from _PG_init */
extern void idx_applier_define_gucs(void);

/* The launcher, registered from _PG_init while preloading */
extern void idx_applier_register_launcher(void);

#endif							/* IDXTABLE_LAUNCHER_H */
