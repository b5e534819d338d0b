/*-------------------------------------------------------------------------
 *
 * module.h
 *		  The module's identity: is a foreign-data wrapper ours?
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/module.h
 *
 * The one declaration of fdw/ that the layers below may include
 * (test/check_layers.py allows it): index DDL and the change-stream
 * workers must recognise our wrappers, whatever they are called, by their
 * handler, which only idxtable_fdw.c can compare.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDXTABLE_MODULE_H
#define IDXTABLE_MODULE_H

/* idxtable_fdw.c: is this foreign-data wrapper's handler ours? */
extern bool idx_fdw_is_ours(Oid fdwid);

#endif							/* IDXTABLE_MODULE_H */
