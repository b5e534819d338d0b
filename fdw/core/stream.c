/*-------------------------------------------------------------------------
 *
 * stream.c
 *		  The stream libmongoc talks to MongoDB through: every wait is a
 *		  PostgreSQL latch wait, and every reply is validated before
 *		  libmongoc parses it.
 *
 * Copyright (c) 2026, idxtable_fdw developers
 * Distributed under the PostgreSQL Licence; see the LICENSE file.
 *
 * IDENTIFICATION
 *		  fdw/core/stream.c
 *
 * libmongoc 1.x is synchronous, and its own sockets wait in poll() and
 * retry on EINTR, so neither statement_timeout, pg_cancel_backend nor
 * pg_terminate_backend could stop a query waiting on a silent server.  It
 * also parses replies trustingly (a short OP_MSG section length makes
 * _mongoc_rpc_scatter read and write out of bounds).  So every client we
 * create gets a stream initiator of our own, which builds this chain:
 *
 *	  root stream (a non-blocking socket; waits on MyLatch and the socket)
 *	  [ libmongoc's TLS stream, if the URI asks for TLS ]
 *	  checking stream (reads whole replies; reply_check.c validates them)
 *
 * No callback ever throws: PostgreSQL errors would longjmp out of
 * libmongoc with the connection mid-message.  A pending interrupt instead
 * makes the I/O fail with ECANCELED (poll: POLLERR on every stream), marks
 * the client's connection broken and is latched; a malformed reply fails
 * with EPROTO and is recorded.  When libmongoc has returned, the error
 * reporting of connection.c calls idx_stream_raise_failure(), which raises
 * the interrupt through CHECK_FOR_INTERRUPTS (57014, or the terminate) or
 * a protocol_violation naming what was wrong.  A broken client fails every
 * later I/O at once (no retry, no killCursors, no endSessions) and is
 * replaced by the connection cache.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

#include "core/mongoc_compat.h"
#include "core/pg_compat.h"
#include "core/reply_check.h"
#include "core/stream.h"

/* Stream types of our own (libmongoc reserves 1 to 7) */
#define IDX_STREAM_ROOT		0x49445801
#define IDX_STREAM_CHECK	0x49445802

/* The largest reply accepted (MongoDB's maxMessageSizeBytes) */
#define IDX_MAX_MESSAGE		48000000

/*
 * What the streams of one client share.  malloc'd: libmongoc decides when
 * streams die, so nothing here may live in a memory context.
 */
typedef struct StreamOwner
{
	struct StreamOwner *next;
	mongoc_client_t *client;
	bool		broken;			/* cancelled or malformed: fail all I/O */
	bool		tls;
	int32		connect_timeout_ms;
	mongoc_ssl_opt_t ssl;		/* strings below, copied from the URI */
	char	   *pem_file;
	char	   *pem_pwd;
	char	   *ca_file;
} StreamOwner;

/*
 * The root stream: a connected non-blocking socket.  Its waits share one
 * WaitEventSet (MyLatch, postmaster death, the socket), built at the first
 * wait and kept until the stream is closed: building a set per wait costs
 * an epoll_create1, three epoll_ctl and a close each time.  It lives in
 * TopMemoryContext, since libmongoc decides when streams die.
 */
typedef struct RootStream
{
	mongoc_stream_t vtable;
	StreamOwner *owner;
	pgsocket	fd;
	WaitEventSet *set;			/* NULL until the first wait */
	int			sock_pos;		/* the socket's event in "set" */
	bool		timed_out;		/* the last operation timed out */
	bool		would_block;	/* the last operation would have blocked */
} RootStream;

/*
 * The outermost stream: serves validated replies.  A reply's length
 * prefix is read first and served alone; the rest is read when libmongoc
 * asks for it (see check_readv()).
 */
typedef struct CheckStream
{
	mongoc_stream_t vtable;
	StreamOwner *owner;
	mongoc_stream_t *base;
	char		host[BSON_HOST_NAME_MAX + 7];
	uint8	   *msg;			/* the current reply, once read here */
	size_t		msglen;
	size_t		served;			/* bytes of it handed to libmongoc */
	size_t		alloc;
	bool		rest_unread;	/* only msg's length prefix has been read */
} CheckStream;

static StreamOwner *owners = NULL;

/*
 * An interrupt made an operation fail: raise it after libmongoc returns.
 * Only in the statement that latched it: a failure libmongoc swallowed
 * (killCursors, abortTransaction at abort) must not turn a later error
 * into a cancel.
 */
static bool cancel_latched = false;
static TimestampTz cancel_statement = 0;

/* An error thrown by a PostgreSQL wait function, to re-throw later */
static ErrorData *wait_error = NULL;

/* The last malformed reply: why (a translatable literal) and from where */
static const char *protocol_reason = NULL;
static char protocol_host[BSON_HOST_NAME_MAX + 7];
static TimestampTz protocol_statement = 0;	/* (as cancel_statement) */

/*
 * Set only while a scan's mongoc_cursor_next() runs: the documents of the
 * cursor batches read meanwhile are checked by the scan's row conversion
 * (idx_check_reply()'s "defer_batch").
 */
static bool defer_batch_check = false;


/* ----------------------------------------------------------------
 *		Waiting
 * ----------------------------------------------------------------
 */

/*
 * Must the current operation stop?  Yes if the client is already broken,
 * a wait threw, or an interrupt (cancel, statement_timeout, terminate) is
 * pending; the latter two break the client and latch the cancel.  Sets
 * errno to ECANCELED when stopping (never EINTR or EAGAIN, which
 * libmongoc's TLS and scanner would retry).
 */
static bool
must_stop(StreamOwner *owner)
{
	if (!owner->broken &&
		(QueryCancelPending || ProcDiePending || wait_error != NULL))
	{
		if (QueryCancelPending || ProcDiePending)
		{
			cancel_latched = true;
			cancel_statement = GetCurrentStatementStartTimestamp();
		}
		owner->broken = true;
	}
	if (owner->broken)
		errno = ECANCELED;
	return owner->broken;
}

/*
 * The monotonic deadline (microseconds) of an operation with libmongoc's
 * timeout convention: negative waits forever (-1), 0 does not wait.
 */
static int64
deadline_after(int32_t timeout_msec)
{
	if (timeout_msec < 0)
		return -1;
	return bson_get_monotonic_time() + (int64) timeout_msec * 1000;
}

/*
 * Milliseconds left until "deadline" (-1: forever), at least 0.
 */
static long
msec_left(int64 deadline)
{
	int64		now;

	if (deadline < 0)
		return -1;
	now = bson_get_monotonic_time();
	return now >= deadline ? 0 : (long) ((deadline - now + 999) / 1000);
}

/*
 * Keep an error thrown inside a callback, to be re-thrown once libmongoc
 * has returned.  Called in a PG_CATCH block, with the interrupt holdoff
 * counts saved before its PG_TRY: errfinish() zeroes them for the handler,
 * but a callback can run inside a holdoff section (abort processing), and
 * its RESUME_INTERRUPTS() would then take the count below zero.
 */
static void
keep_wait_error(MemoryContext cxt, uint32 save_holdoff,
				uint32 save_cancel_holdoff)
{
	InterruptHoldoffCount = save_holdoff;
	QueryCancelHoldoffCount = save_cancel_holdoff;
	MemoryContextSwitchTo(TopMemoryContext);
	if (wait_error == NULL)
		wait_error = CopyErrorData();
	FlushErrorState();
	MemoryContextSwitchTo(cxt);
}

/*
 * WaitLatchOrSocket that never throws: -1 if it did (the error is kept).
 */
static int
latch_wait(int wakeEvents, pgsocket fd, long timeout)
{
	MemoryContext cxt = CurrentMemoryContext;
	uint32		save_holdoff = InterruptHoldoffCount;
	uint32		save_cancel_holdoff = QueryCancelHoldoffCount;
	volatile int rc = -1;

	PG_TRY();
	{
		rc = WaitLatchOrSocket(MyLatch, wakeEvents, fd, timeout,
							   PG_WAIT_EXTENSION);
	}
	PG_CATCH();
	{
		keep_wait_error(cxt, save_holdoff, save_cancel_holdoff);
		rc = -1;
	}
	PG_END_TRY();
	return rc;
}

/*
 * Free the root stream's WaitEventSet, if built (never throws).
 */
static void
free_wait_set(RootStream *rs)
{
	WaitEventSet *set = rs->set;

	rs->set = NULL;
	if (set != NULL)
		FreeWaitEventSet(set);
}

/*
 * Wait on the root stream's own WaitEventSet for "events" on its socket,
 * building the set at the first wait: as WaitLatchOrSocket (the WL_* bits
 * that occurred, WL_TIMEOUT if none) but never throws: -1 if it did (the
 * error is kept).
 */
static int
stream_wait(RootStream *rs, int events, long timeout)
{
	MemoryContext cxt = CurrentMemoryContext;
	uint32		save_holdoff = InterruptHoldoffCount;
	uint32		save_cancel_holdoff = QueryCancelHoldoffCount;
	volatile int rc = -1;

	PG_TRY();
	{
		WaitEvent	occurred[3];
		int			n;
		int			i;

		if (rs->set == NULL)
		{
			WaitEventSet *set = idx_create_wait_event_set(TopMemoryContext, 3);

			rs->set = set;
			AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch,
							  NULL);
			AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET,
							  NULL, NULL);
			rs->sock_pos = AddWaitEventToSet(set, events, rs->fd, NULL, NULL);
		}
		else
			ModifyWaitEvent(rs->set, rs->sock_pos, events, NULL);
		n = WaitEventSetWait(rs->set, timeout, occurred, lengthof(occurred),
							 PG_WAIT_EXTENSION);
		rc = 0;
		for (i = 0; i < n; i++)
			rc |= occurred[i].events;
		if (n == 0)
			rc = WL_TIMEOUT;
	}
	PG_CATCH();
	{
		keep_wait_error(cxt, save_holdoff, save_cancel_holdoff);
		free_wait_set(rs);
		rc = -1;
	}
	PG_END_TRY();
	return rc;
}

/*
 * Wait until "fd" is ready for "events" (WL_SOCKET_*) or "deadline"
 * passes, waking for interrupts; on the set of root stream "rs" if given
 * (the socket is then its own).  1: ready, 0: timed out, -1: stopped
 * (errno ECANCELED).
 */
static int
wait_socket(StreamOwner *owner, RootStream *rs, pgsocket fd, int events,
			int64 deadline)
{
	for (;;)
	{
		long		timeout;
		int			rc;

		if (must_stop(owner))
			return -1;
		timeout = msec_left(deadline);
		if (timeout == 0)
			return 0;
		if (rs != NULL)
			rc = stream_wait(rs, events, timeout);
		else
			rc = latch_wait(WL_LATCH_SET | WL_EXIT_ON_PM_DEATH | events |
							(timeout > 0 ? WL_TIMEOUT : 0), fd, timeout);
		if (rc < 0)
			continue;			/* must_stop() sees the kept error */
		if (rc & WL_LATCH_SET)
			ResetLatch(MyLatch);
		if (rc & events)
			return 1;
	}
}


/* ----------------------------------------------------------------
 *		Root stream
 * ----------------------------------------------------------------
 */

/*
 * Read into "iov" until "min_bytes" have arrived (at least one byte when
 * min_bytes is 0), EOF, an error or the timeout.  As libmongoc's socket
 * stream: the byte count, 0 at EOF, or -1 with errno.
 */
static ssize_t
root_readv(mongoc_stream_t *stream, mongoc_iovec_t *iov, size_t iovcnt,
		   size_t min_bytes, int32_t timeout_msec)
{
	RootStream *rs = (RootStream *) stream;
	int64		deadline = deadline_after(timeout_msec);
	size_t		i = 0,
				off = 0;
	ssize_t		total = 0;

	rs->timed_out = rs->would_block = false;
	while (i < iovcnt)
	{
		ssize_t		n;
		int			rc;

		if (off == iov[i].iov_len)
		{
			i++, off = 0;
			continue;
		}
		if (must_stop(rs->owner))
			return -1;
		if (rs->fd == PGINVALID_SOCKET)
		{
			errno = ENOTCONN;	/* a cancelled connection's */
			return -1;
		}
		n = recv(rs->fd, (char *) iov[i].iov_base + off,
				 iov[i].iov_len - off, 0);
		if (n > 0)
		{
			total += n, off += n;
			if ((size_t) total >= min_bytes)
				return total;
			continue;
		}
		if (n == 0)
		{
			if ((size_t) total >= min_bytes)
				return total;
			errno = ECONNRESET;
			return -1;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -1;
		if (total > 0 && (size_t) total >= min_bytes)
			return total;
		if (timeout_msec == 0)
		{
			rs->would_block = true;
			errno = EAGAIN;
			return total > 0 ? total : -1;
		}
		rc = wait_socket(rs->owner, rs, rs->fd, WL_SOCKET_READABLE,
						 deadline);
		if (rc < 0)
			return -1;
		if (rc == 0)
		{
			rs->timed_out = true;
			errno = ETIMEDOUT;
			return -1;
		}
	}
	return total;
}

/*
 * Write all of "iov" (with timeout 0: what can be written without
 * blocking).  The byte count, or -1 with errno.
 */
static ssize_t
root_writev(mongoc_stream_t *stream, mongoc_iovec_t *iov, size_t iovcnt,
			int32_t timeout_msec)
{
	RootStream *rs = (RootStream *) stream;
	int64		deadline = deadline_after(timeout_msec);
	struct iovec *v = bson_malloc(sizeof(struct iovec) * Max(iovcnt, 1));
	size_t		first = 0;
	ssize_t		total = 0;
	ssize_t		result = -1;

	memcpy(v, iov, sizeof(struct iovec) * iovcnt);
	rs->timed_out = rs->would_block = false;
	for (;;)
	{
		struct msghdr msg;
		ssize_t		n;
		int			rc;

		while (first < iovcnt && v[first].iov_len == 0)
			first++;
		if (first == iovcnt)
		{
			result = total;
			break;
		}
		if (must_stop(rs->owner))
			break;
		if (rs->fd == PGINVALID_SOCKET)
		{
			errno = ENOTCONN;	/* a cancelled connection's */
			break;
		}
		memset(&msg, 0, sizeof(msg));
		msg.msg_iov = v + first;
		msg.msg_iovlen = Min(iovcnt - first, 1024);
		n = sendmsg(rs->fd, &msg, MSG_NOSIGNAL);
		if (n >= 0)
		{
			total += n;
			while (n > 0)
			{
				size_t		step = Min((size_t) n, v[first].iov_len);

				v[first].iov_base = (char *) v[first].iov_base + step;
				v[first].iov_len -= step;
				n -= step;
				if (v[first].iov_len == 0)
					first++;
			}
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			break;
		if (timeout_msec == 0)
		{
			rs->would_block = true;
			result = total > 0 ? total : -1;
			errno = EAGAIN;
			break;
		}
		rc = wait_socket(rs->owner, rs, rs->fd, WL_SOCKET_WRITEABLE,
						 deadline);
		if (rc < 0)
			break;
		if (rc == 0)
		{
			rs->timed_out = true;
			errno = ETIMEDOUT;
			break;
		}
	}
	bson_free(v);
	return result;
}

/*
 * Wait on several root streams (libmongoc's scanner) and our latch.  On
 * an interrupt every stream reports POLLERR: returning -1 would make the
 * scanner poll again until connectTimeoutMS.  This builds a set per call
 * rather than share the streams' own: the scanner polls once per
 * connection and heartbeat, not once per round trip.
 */
static ssize_t
root_poll_once(mongoc_stream_poll_t *streams, size_t nstreams, long timeout)
{
	WaitEventSet *volatile set = NULL;
	MemoryContext cxt = CurrentMemoryContext;
	uint32		save_holdoff = InterruptHoldoffCount;
	uint32		save_cancel_holdoff = QueryCancelHoldoffCount;
	volatile ssize_t nready = -1;

	PG_TRY();
	{
		WaitEvent  *occurred = palloc(sizeof(WaitEvent) * (nstreams + 2));
		int			n;
		int			i;

		set = idx_create_wait_event_set(CurrentMemoryContext, nstreams + 2);
		AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL,
						  NULL);
		for (i = 0; i < nstreams; i++)
		{
			int			ev = ((streams[i].events & POLLIN) ? WL_SOCKET_READABLE : 0) |
			((streams[i].events & POLLOUT) ? WL_SOCKET_WRITEABLE : 0);

			if (ev)
				AddWaitEventToSet(set, ev,
								  ((RootStream *) streams[i].stream)->fd,
								  NULL, (void *) (intptr_t) i);
		}
		n = WaitEventSetWait(set, timeout, occurred, nstreams + 2,
							 PG_WAIT_EXTENSION);
		nready = 0;
		for (i = 0; i < n; i++)
		{
			int			k = (int) (intptr_t) occurred[i].user_data;

			if (occurred[i].events & WL_LATCH_SET)
				ResetLatch(MyLatch);
			else if (occurred[i].events & (WL_SOCKET_READABLE | WL_SOCKET_WRITEABLE))
			{
				streams[k].revents |=
					((occurred[i].events & WL_SOCKET_READABLE) ? POLLIN : 0) |
					((occurred[i].events & WL_SOCKET_WRITEABLE) ? POLLOUT : 0);
				nready++;
			}
		}
		FreeWaitEventSet(set);
		pfree(occurred);
	}
	PG_CATCH();
	{
		keep_wait_error(cxt, save_holdoff, save_cancel_holdoff);
		if (set != NULL)
			FreeWaitEventSet(set);
		nready = -1;
	}
	PG_END_TRY();
	return nready;
}

/*
 * mongoc_stream_poll() on root streams: wait with root_poll_once() until a
 * stream is ready or the timeout passes.  A pending interrupt (or a broken
 * client) reports POLLERR on every stream.
 */
static ssize_t
root_poll(mongoc_stream_poll_t *streams, size_t nstreams, int32_t timeout_msec)
{
	StreamOwner *owner = ((RootStream *) streams[0].stream)->owner;
	int64		deadline = deadline_after(timeout_msec);
	size_t		i;

	for (i = 0; i < nstreams; i++)
		streams[i].revents = 0;
	for (;;)
	{
		ssize_t		n;
		bool		socketless = false;

		for (i = 0; i < nstreams; i++)
			socketless = socketless ||
				((RootStream *) streams[i].stream)->fd == PGINVALID_SOCKET;
		if (must_stop(owner) || socketless)
		{
			for (i = 0; i < nstreams; i++)
				streams[i].revents = POLLERR;
			return nstreams;
		}
		/* poll at least once, as poll() does with a timeout of 0 */
		n = root_poll_once(streams, nstreams, msec_left(deadline));
		if (n > 0)
			return n;
		if (n == 0 && deadline >= 0 && msec_left(deadline) == 0)
			return 0;
	}
}

/*
 * Has the peer closed the connection?  (libmongoc asks before reusing a
 * connection idle for more than a second.)
 */
static bool
root_check_closed(mongoc_stream_t *stream)
{
	RootStream *rs = (RootStream *) stream;
	struct pollfd pfd;
	char		c;
	ssize_t		n;

	if (rs->fd == PGINVALID_SOCKET || rs->owner->broken)
		return true;
	pfd.fd = rs->fd;
	pfd.events = POLLIN;
	pfd.revents = 0;
	if (poll(&pfd, 1, 0) <= 0)
		return false;
	if (pfd.revents & (POLLERR | POLLHUP | POLLNVAL))
		return true;
	n = recv(rs->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
					  errno != EINTR);
}

/*
 * Close the socket (the stream stays until libmongoc destroys it).
 */
static int
root_close(mongoc_stream_t *stream)
{
	RootStream *rs = (RootStream *) stream;

	free_wait_set(rs);
	if (rs->fd != PGINVALID_SOCKET)
		close(rs->fd);
	rs->fd = PGINVALID_SOCKET;
	return 0;
}

/*
 * Destroy a root stream and close its socket; also libmongoc's "failed".
 */
static void
root_destroy(mongoc_stream_t *stream)
{
	root_close(stream);
	bson_free(stream);
}

/*
 * Nothing is buffered: writes go straight to the socket.
 */
static int
root_flush(mongoc_stream_t *stream)
{
	return 0;
}

/*
 * setsockopt() on the socket (mongoc_stream_setsockopt).
 */
static int
root_setsockopt(mongoc_stream_t *stream, int level, int optname,
				void *optval, mongoc_socklen_t optlen)
{
	return setsockopt(((RootStream *) stream)->fd, level, optname, optval,
					  optlen);
}

/*
 * Did the last read or write time out (mongoc_stream_timed_out)?
 */
static bool
root_timed_out(mongoc_stream_t *stream)
{
	return ((RootStream *) stream)->timed_out;
}

/*
 * Would the last zero-timeout read or write have blocked
 * (mongoc_stream_should_retry, which libmongoc's TLS layer asks)?
 */
static bool
root_should_retry(mongoc_stream_t *stream)
{
	return ((RootStream *) stream)->would_block;
}

/*
 * A root stream owning the connected socket "fd".
 */
static mongoc_stream_t *
root_stream_new(StreamOwner *owner, pgsocket fd)
{
	RootStream *rs = bson_malloc0(sizeof(RootStream));

	rs->vtable.type = IDX_STREAM_ROOT;
	rs->vtable.destroy = root_destroy;
	rs->vtable.failed = root_destroy;
	rs->vtable.close = root_close;
	rs->vtable.flush = root_flush;
	rs->vtable.writev = root_writev;
	rs->vtable.readv = root_readv;
	rs->vtable.setsockopt = root_setsockopt;
	rs->vtable.check_closed = root_check_closed;
	rs->vtable.poll = root_poll;
	rs->vtable.timed_out = root_timed_out;
	rs->vtable.should_retry = root_should_retry;
	rs->owner = owner;
	rs->fd = fd;
	return (mongoc_stream_t *) rs;
}


/* ----------------------------------------------------------------
 *		Connecting
 * ----------------------------------------------------------------
 */

/*
 * Connect a non-blocking socket to "addr", waiting interruptibly until
 * "deadline".  The socket, or PGINVALID_SOCKET with errno.
 */
static pgsocket
connect_address(StreamOwner *owner, int family, const struct sockaddr *addr,
				socklen_t addrlen, int64 deadline)
{
	pgsocket	fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int			one = 1;
	int			err = 0;
	socklen_t	errlen = sizeof(err);
	int			rc;

	if (fd == PGINVALID_SOCKET)
		return fd;
	if (family != AF_UNIX)
	{
		(void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		(void) setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	}
	if (connect(fd, addr, addrlen) == 0)
		return fd;
	if (errno == EINPROGRESS || errno == EINTR)
	{
		rc = wait_socket(owner, NULL, fd, WL_SOCKET_WRITEABLE, deadline);
		if (rc == 0)
			errno = ETIMEDOUT;
		else if (rc > 0 &&
				 getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &errlen) == 0)
		{
			if (err == 0)
				return fd;
			errno = err;
		}
	}
	err = errno;
	close(fd);
	errno = err;
	return PGINVALID_SOCKET;
}

/*
 * Connect to "host" (TCP, each resolved address in turn, or a UNIX
 * socket) within connectTimeoutMS.  The socket, or PGINVALID_SOCKET with
 * "error" set.
 */
static pgsocket
connect_host(StreamOwner *owner, const mongoc_host_list_t *host,
			 bson_error_t *error)
{
	int64		deadline = deadline_after(owner->connect_timeout_ms);
	pgsocket	fd = PGINVALID_SOCKET;

	if (host->family == AF_UNIX)
	{
		struct sockaddr_un sun;

		memset(&sun, 0, sizeof(sun));
		sun.sun_family = AF_UNIX;
		strlcpy(sun.sun_path, host->host, sizeof(sun.sun_path));
		fd = connect_address(owner, AF_UNIX, (struct sockaddr *) &sun,
							 sizeof(sun), deadline);
	}
	else
	{
		struct addrinfo hints;
		struct addrinfo *res = NULL;
		struct addrinfo *ai;
		char		port[8];

		memset(&hints, 0, sizeof(hints));
		hints.ai_family = host->family;
		hints.ai_socktype = SOCK_STREAM;
		snprintf(port, sizeof(port), "%u", (unsigned) host->port);
		if (getaddrinfo(host->host, port, &hints, &res) != 0)
		{
			bson_set_error(error, MONGOC_ERROR_STREAM,
						   MONGOC_ERROR_STREAM_NAME_RESOLUTION,
						   "Failed to resolve '%s'", host->host);
			return PGINVALID_SOCKET;
		}
		for (ai = res; ai && fd == PGINVALID_SOCKET && !owner->broken;
			 ai = ai->ai_next)
			fd = connect_address(owner, ai->ai_family, ai->ai_addr,
								 ai->ai_addrlen, deadline);
		freeaddrinfo(res);
	}
	if (fd == PGINVALID_SOCKET)
		bson_set_error(error, MONGOC_ERROR_STREAM,
					   MONGOC_ERROR_STREAM_CONNECT,
					   "Failed to connect to target host: %s (%s)",
					   host->host_and_port, strerror(errno));
	return fd;
}


/* ----------------------------------------------------------------
 *		Checking stream
 * ----------------------------------------------------------------
 */

/*
 * Record a malformed reply and break the connection.
 */
static void
set_protocol_error(CheckStream *cs, const char *reason)
{
	cs->owner->broken = true;
	if (protocol_reason == NULL ||
		protocol_statement != GetCurrentStatementStartTimestamp())
	{
		protocol_statement = GetCurrentStatementStartTimestamp();
		protocol_reason = reason;
		strlcpy(protocol_host, cs->host, sizeof(protocol_host));
	}
	errno = EPROTO;
}

/*
 * Read exactly "len" bytes from the base stream before "deadline".
 */
static bool
read_exact(CheckStream *cs, uint8 *buf, size_t len, int64 deadline)
{
	ssize_t		n;
	long		left = msec_left(deadline);

	if (deadline >= 0 && left == 0)
	{
		errno = ETIMEDOUT;
		return false;
	}
	n = mongoc_stream_read(cs->base, buf, len, len,
						   left > INT32_MAX ? INT32_MAX : (int32_t) left);
	if (n == (ssize_t) len)
		return true;
	if (n >= 0)
		errno = ECONNRESET;
	return false;
}

/*
 * The deadline of a read with libmongoc's "timeout_msec": 0 (libmongoc's
 * scanner, which found the socket readable) waits up to connectTimeoutMS
 * for the rest of the reply.
 */
static int64
read_deadline(CheckStream *cs, int32_t timeout_msec)
{
	return deadline_after(timeout_msec == 0 ?
						  cs->owner->connect_timeout_ms : timeout_msec);
}

/*
 * Read the length prefix of the next reply from the base stream into
 * cs->msg and check its range; the rest is left unread.  The buffer is
 * kept for the life of the stream (check_destroy frees it): a server's
 * batches are up to 16 MiB each, and allocating each afresh costs a
 * fresh mapping and its page faults per reply.
 */
static bool
read_length(CheckStream *cs, int32_t timeout_msec)
{
	uint8		header[4];
	int32		len;

	cs->msglen = cs->served = 0;
	cs->rest_unread = false;
	if (!read_exact(cs, header, 4, read_deadline(cs, timeout_msec)))
		return false;
	len = idx_wire_int32(header);
	if (len < 16 || len > IDX_MAX_MESSAGE)
	{
		set_protocol_error(cs, gettext_noop("The reply's length is out of range."));
		return false;
	}
	if (cs->alloc < (size_t) len)
	{
		cs->msg = bson_realloc(cs->msg, len);
		cs->alloc = len;
	}
	memcpy(cs->msg, header, 4);
	cs->msglen = len;
	cs->rest_unread = true;
	return true;
}

/*
 * Read the rest of the current reply (all but its length prefix) into
 * "rest" and validate it.  Nothing of it may be served unless this
 * succeeds.
 */
static bool
read_rest(CheckStream *cs, uint8 *rest, int32_t timeout_msec)
{
	const char *reason;

	cs->rest_unread = false;
	if (read_exact(cs, rest, cs->msglen - 4, read_deadline(cs, timeout_msec)))
	{
		reason = idx_check_reply(rest, cs->msglen, defer_batch_check);
		if (reason == NULL)
			return true;
		set_protocol_error(cs, reason);
	}
	/* nothing more of this reply is served */
	cs->msglen = cs->served = 0;
	return false;
}

/*
 * Serve validated bytes.  libmongoc reads a reply as its length prefix,
 * then the rest into one buffer of that size.  So the prefix is served
 * alone (its range checked), and when the next request is exactly the
 * rest in one buffer, the rest is read and validated right there, which
 * spares a copy of every reply; libmongoc sees those bytes only if they
 * pass, as a failed read leaves its buffer unused.  Any other request
 * reads the rest into our buffer, validates it and serves copies.
 */
static ssize_t
check_readv(mongoc_stream_t *stream, mongoc_iovec_t *iov, size_t iovcnt,
			size_t min_bytes, int32_t timeout_msec)
{
	CheckStream *cs = (CheckStream *) stream;
	size_t		total = 0;
	size_t		i;

	if (must_stop(cs->owner))
		return -1;
	if (cs->served == cs->msglen && !read_length(cs, timeout_msec))
		return -1;
	if (cs->rest_unread && cs->served == 0 && iovcnt >= 1 &&
		iov[0].iov_len == 4 && min_bytes <= 4)
	{
		memcpy(iov[0].iov_base, cs->msg, 4);
		cs->served = 4;
		return 4;
	}
	if (cs->rest_unread && cs->served == 4 && iovcnt == 1 &&
		iov[0].iov_len == cs->msglen - 4)
	{
		if (!read_rest(cs, iov[0].iov_base, timeout_msec))
			return -1;
		cs->served = cs->msglen;
		return cs->msglen - 4;
	}
	if (cs->rest_unread && !read_rest(cs, cs->msg + 4, timeout_msec))
		return -1;
	for (i = 0; i < iovcnt && cs->served < cs->msglen; i++)
	{
		size_t		step = Min(iov[i].iov_len, cs->msglen - cs->served);

		memcpy(iov[i].iov_base, cs->msg + cs->served, step);
		cs->served += step;
		total += step;
	}
	if (total < min_bytes)
	{
		set_protocol_error(cs, gettext_noop("The client expected a longer reply."));
		return -1;
	}
	return total;
}

/*
 * Pass a request down; a reply not entirely read means the connection is
 * out of step, so that is refused.
 */
static ssize_t
check_writev(mongoc_stream_t *stream, mongoc_iovec_t *iov, size_t iovcnt,
			 int32_t timeout_msec)
{
	CheckStream *cs = (CheckStream *) stream;

	if (must_stop(cs->owner))
		return -1;
	if (cs->served != cs->msglen)
	{
		set_protocol_error(cs, gettext_noop("The client sent a request before reading the whole reply."));
		return -1;
	}
	return mongoc_stream_writev(cs->base, iov, iovcnt, timeout_msec);
}

/*
 * Destroy the checking stream, the streams under it and its reply buffer;
 * also libmongoc's "failed".
 */
static void
check_destroy(mongoc_stream_t *stream)
{
	CheckStream *cs = (CheckStream *) stream;

	mongoc_stream_destroy(cs->base);
	bson_free(cs->msg);
	bson_free(cs);
}

/*
 * Close the streams under the checking stream.
 */
static int
check_close(mongoc_stream_t *stream)
{
	return mongoc_stream_close(((CheckStream *) stream)->base);
}

/*
 * Flush the streams under the checking stream.
 */
static int
check_flush(mongoc_stream_t *stream)
{
	return mongoc_stream_flush(((CheckStream *) stream)->base);
}

/*
 * Pass setsockopt() down to the socket.
 */
static int
check_setsockopt(mongoc_stream_t *stream, int level, int optname,
				 void *optval, mongoc_socklen_t optlen)
{
	return mongoc_stream_setsockopt(((CheckStream *) stream)->base, level,
									optname, optval, optlen);
}

/*
 * The stream under the checking one (libmongoc finds the root stream
 * through this, for polling and for TLS).
 */
static mongoc_stream_t *
check_get_base(mongoc_stream_t *stream)
{
	return ((CheckStream *) stream)->base;
}

/*
 * A broken client's connection counts as closed, so it is not reused.
 */
static bool
check_check_closed(mongoc_stream_t *stream)
{
	CheckStream *cs = (CheckStream *) stream;

	return cs->owner->broken || mongoc_stream_check_closed(cs->base);
}

/*
 * Did the last operation of the streams below time out?
 */
static bool
check_timed_out(mongoc_stream_t *stream)
{
	return mongoc_stream_timed_out(((CheckStream *) stream)->base);
}

/*
 * Retry a blocked operation of the streams below, never on a broken
 * client.
 */
static bool
check_should_retry(mongoc_stream_t *stream)
{
	CheckStream *cs = (CheckStream *) stream;

	return !cs->owner->broken && mongoc_stream_should_retry(cs->base);
}

/*
 * The checking stream over "base", for replies from "host".
 */
static mongoc_stream_t *
check_stream_new(StreamOwner *owner, mongoc_stream_t *base,
				 const mongoc_host_list_t *host)
{
	CheckStream *cs = bson_malloc0(sizeof(CheckStream));

	cs->vtable.type = IDX_STREAM_CHECK;
	cs->vtable.destroy = check_destroy;
	cs->vtable.failed = check_destroy;
	cs->vtable.close = check_close;
	cs->vtable.flush = check_flush;
	cs->vtable.writev = check_writev;
	cs->vtable.readv = check_readv;
	cs->vtable.setsockopt = check_setsockopt;
	cs->vtable.get_base_stream = check_get_base;
	cs->vtable.check_closed = check_check_closed;
	cs->vtable.timed_out = check_timed_out;
	cs->vtable.should_retry = check_should_retry;
	cs->owner = owner;
	cs->base = base;
	strlcpy(cs->host, host->host_and_port, sizeof(cs->host));
	return (mongoc_stream_t *) cs;
}


/* ----------------------------------------------------------------
 *		Initiator and clients
 * ----------------------------------------------------------------
 */

/*
 * libmongoc's stream initiator: connect, wrap in TLS if asked for (and
 * finish the handshake, as libmongoc's own initiator does), then in the
 * checking stream.  Refuses while the client is broken or an interrupt is
 * pending, so that libmongoc's retry does not reconnect after a cancel.
 */
static mongoc_stream_t *
initiator(const mongoc_uri_t *uri, const mongoc_host_list_t *host,
		  void *user_data, bson_error_t *error)
{
	StreamOwner *owner = (StreamOwner *) user_data;
	mongoc_stream_t *stream;
	pgsocket	fd;

	/*
	 * Cancelled: no connection, but a stream whose every operation fails
	 * (ECANCELED).  Not NULL: libmongoc 1.23's scanner retries a known
	 * member's failed check at once, and if the initiator then returns
	 * NULL, its error callback waits for the topology's lock, which the
	 * retrying scanner holds: the backend would hang for good (seen on a
	 * replica set of three members when the applier was terminated).
	 */
	if (must_stop(owner))
		return check_stream_new(owner, root_stream_new(owner, PGINVALID_SOCKET),
								host);
	fd = connect_host(owner, host, error);
	if (fd == PGINVALID_SOCKET)
		return NULL;
	stream = root_stream_new(owner, fd);
	if (owner->tls)
	{
		mongoc_stream_t *tls;

		tls = mongoc_stream_tls_new_with_hostname(stream, host->host,
												  &owner->ssl, 1);
		if (tls == NULL)
		{
			mongoc_stream_destroy(stream);
			bson_set_error(error, MONGOC_ERROR_STREAM,
						   MONGOC_ERROR_STREAM_SOCKET,
						   "Failed to initialize TLS state.");
			return NULL;
		}
		stream = tls;
		if (!mongoc_stream_tls_handshake_block(stream, host->host,
											   owner->connect_timeout_ms,
											   error))
		{
			mongoc_stream_destroy(stream);
			return NULL;
		}
	}
	return check_stream_new(owner, stream, host);
}

/*
 * Copy a string option of the URI (NULL if absent) into malloc'd memory.
 */
static char *
uri_string(const mongoc_uri_t *uri, const char *option)
{
	const char *value = mongoc_uri_get_option_as_utf8(uri, option, NULL);

	return value ? bson_strdup(value) : NULL;
}

/*
 * Map the URI's tls* options to the owner's mongoc_ssl_opt_t, as libmongoc
 * does for its own connections.  (OCSP checks cannot be turned off through
 * the public API.)
 */
static void
set_tls_options(StreamOwner *owner, const mongoc_uri_t *uri)
{
	bool		insecure = mongoc_uri_get_option_as_bool(uri, MONGOC_URI_TLSINSECURE, false);

	owner->tls = mongoc_uri_get_tls(uri);
	if (!owner->tls)
		return;
	owner->pem_file = uri_string(uri, MONGOC_URI_TLSCERTIFICATEKEYFILE);
	owner->pem_pwd = uri_string(uri, MONGOC_URI_TLSCERTIFICATEKEYFILEPASSWORD);
	owner->ca_file = uri_string(uri, MONGOC_URI_TLSCAFILE);
	owner->ssl.pem_file = owner->pem_file;
	owner->ssl.pem_pwd = owner->pem_pwd;
	owner->ssl.ca_file = owner->ca_file;
	owner->ssl.weak_cert_validation = insecure ||
		mongoc_uri_get_option_as_bool(uri, MONGOC_URI_TLSALLOWINVALIDCERTIFICATES, false);
	owner->ssl.allow_invalid_hostname = insecure ||
		mongoc_uri_get_option_as_bool(uri, MONGOC_URI_TLSALLOWINVALIDHOSTNAMES, false);
}

/*
 * Free a stream owner and its copies of the URI's TLS strings.
 */
static void
free_owner(StreamOwner *owner)
{
	bson_free(owner->pem_file);
	bson_free(owner->pem_pwd);
	bson_free(owner->ca_file);
	bson_free(owner);
}

/*
 * Create a client whose connections go through our streams.
 */
mongoc_client_t *
idx_stream_client_new(const mongoc_uri_t *uri, const char *servername)
{
	const bson_t *compressors = mongoc_uri_get_compressors(uri);
	StreamOwner *owner;
	mongoc_client_t *client;

	if (compressors && !bson_empty(compressors))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("the \"uri\" option of server \"%s\" asks for wire compression",
						servername),
				 errdetail("idxtable_fdw does not accept compressed replies."),
				 errhint("Remove \"compressors\" from the uri.")));

	client = mongoc_client_new_from_uri(uri);
	if (client == NULL)
		return NULL;
	owner = bson_malloc0(sizeof(StreamOwner));
	owner->client = client;
	owner->connect_timeout_ms =
		mongoc_uri_get_option_as_int32(uri, MONGOC_URI_CONNECTTIMEOUTMS,
									   MONGOC_DEFAULT_CONNECTTIMEOUTMS);
	if (owner->connect_timeout_ms <= 0)
		owner->connect_timeout_ms = MONGOC_DEFAULT_CONNECTTIMEOUTMS;
	set_tls_options(owner, uri);
	owner->next = owners;
	owners = owner;
	mongoc_client_set_stream_initiator(client, initiator, owner);
	return client;
}

/*
 * The owner of a client's streams, unlinked from the list if "unlink".
 */
static StreamOwner *
find_owner(mongoc_client_t *client, bool unlink)
{
	StreamOwner **prev;

	for (prev = &owners; *prev; prev = &(*prev)->next)
	{
		StreamOwner *owner = *prev;

		if (owner->client == client)
		{
			if (unlink)
				*prev = owner->next;
			return owner;
		}
	}
	return NULL;
}

/*
 * Destroy a client.  A broken one is reset first, so that neither its
 * cursors nor its sessions try to reach the server (its streams would
 * fail at once anyway).
 */
void
idx_stream_client_destroy(mongoc_client_t *client)
{
	StreamOwner *owner = find_owner(client, true);

	if (owner && owner->broken)
		mongoc_client_reset(client);
	mongoc_client_destroy(client);
	if (owner)
		free_owner(owner);
}

/*
 * Was the client's connection broken by a cancel or a malformed reply?
 */
bool
idx_stream_client_broken(mongoc_client_t *client)
{
	StreamOwner *owner = find_owner(client, false);

	return owner != NULL && owner->broken;
}

/*
 * Raise what made a libmongoc call fail, if it was ours: an error thrown
 * by a wait, the pending interrupt (through CHECK_FOR_INTERRUPTS, so it is
 * PostgreSQL's own cancel, statement timeout or terminate), or a
 * malformed reply.
 */
void
idx_stream_raise_failure(const char *servername)
{
	if (wait_error != NULL)
	{
		ErrorData  *edata = wait_error;

		wait_error = NULL;
		cancel_latched = false;
		ReThrowError(edata);
	}
	if (cancel_latched &&
		cancel_statement != GetCurrentStatementStartTimestamp())
		cancel_latched = false;
	if (cancel_latched)
	{
		cancel_latched = false;
		protocol_reason = NULL;
		CHECK_FOR_INTERRUPTS();
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("canceling the operation on server \"%s\"",
						servername)));
	}
	if (protocol_reason != NULL &&
		protocol_statement == GetCurrentStatementStartTimestamp())
	{
		const char *reason = protocol_reason;

		protocol_reason = NULL;
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("server \"%s\" sent a malformed reply", servername),
				 errdetail_internal("%s", _(reason)),
				 errcontext("reply from %s", protocol_host)));
	}
}

/*
 * Leave the documents of the cursor batches read until the next call with
 * "on" false to their reader (see idx_check_reply()).  Only around a call
 * of mongoc_cursor_next(), which never throws, by a reader that checks
 * every document it takes before anything reads it.
 */
void
idx_stream_defer_batch_check(bool on)
{
	defer_batch_check = on;
}

/*
 * A document that a reader of a deferred batch found malformed: break the
 * client's connection as a malformed reply does, and raise the same error
 * (08P01, from "host", the host and port the cursor read from).
 */
void
idx_stream_raise_malformed_document(mongoc_client_t *client,
									const char *servername, const char *host)
{
	StreamOwner *owner = find_owner(client, false);

	if (owner != NULL)
		owner->broken = true;
	ereport(ERROR,
			(errcode(ERRCODE_PROTOCOL_VIOLATION),
			 errmsg("server \"%s\" sent a malformed reply", servername),
			 errdetail_internal("%s", _("A document is corrupt.")),
			 errcontext("reply from %s", host)));
}

/*
 * Forget a latched failure nobody reported (libmongoc ignores some
 * failures, e.g. of killCursors).
 */
void
idx_stream_reset_state(void)
{
	cancel_latched = false;
	protocol_reason = NULL;
	defer_batch_check = false;
	if (wait_error)
		FreeErrorData(wait_error);
	wait_error = NULL;
}
