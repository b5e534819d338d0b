#!/usr/bin/python3
"""MongoDB-wire-compatible test server for the idxtable_fdw tests (stands in for mongod).

Usage: mongo_test_server.py --host 127.0.0.1 --port PORT [--port-file FILE] [--user NAME --password PW]
                            [--log FILE] [--txn-lifetime SECONDS] [--txn-size-limit BYTES]
                            [--dbpath DIR] [--change-history N] [--periodic-noop-secs S] [--bulk-write]
                            [--server-version 6.0|7.0|8.0] [--members N] [--majority-lag-ms MS]
                            [--secondary-lag-ms MS] [--election-timeout-ms MS] [--shards N [--routers R]
                            [--balancer-interval-secs S] [--balancer-random-migrations]]
With --members N the server is a replica set of N members, one per port (PORT, PORT+1, ...; with --port 0
free ones, written to --port-file one a line). With --port 0 a free port is chosen and written to --port-file. Runs until SIGTERM/SIGINT.
With --shards N the server is a sharded cluster of N shards and R mongos routers (default 1), one port per
router (PORT, PORT+1, ...; --port-file lists them), see idxmongo/cluster.py.
With --dbpath every change is journaled in DIR before it is acknowledged, and replayed at the next start.
The implementation lives in the idxmongo package next to this script.
"""

import argparse
import gc
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    from idxmongo import profiling
    from idxmongo.server import Server, configure_logging, write_port_file
except ImportError as exc:  # say which Debian package is missing instead of a bare traceback
    sys.exit("mongo_test_server: %s; it needs the Debian packages python3-pymongo, python3-mongomock and "
             "python3-sortedcontainers, run with /usr/bin/python3" % exc)


def parse_args(argv):
    """Command-line options."""
    parser = argparse.ArgumentParser(description="MongoDB-wire-compatible test server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=27017)
    parser.add_argument("--port-file", help="write the listening port here (useful with --port 0)")
    parser.add_argument("--user", help="require SCRAM authentication as this user (defined on admin)")
    parser.add_argument("--password")
    parser.add_argument("--log", help="debug log of every command")
    parser.add_argument("--txn-lifetime", type=float, default=60.0,
                        help="abort transactions open this long (mongod's transactionLifetimeLimitSeconds)")
    parser.add_argument("--txn-size-limit", type=int, default=0,
                        help="fail a transaction writing more than this many bytes with TransactionTooLargeForCache")
    parser.add_argument("--dbpath", help="keep the data in this directory (a journal, replayed at start), so it "
                                         "survives the process being killed; without it the data lives in memory")
    parser.add_argument("--change-history", type=int, default=0,
                        help="change-stream history: keep this many change events (default 500,000); a resume "
                             "point older than the history fails with ChangeStreamHistoryLost (286)")
    parser.add_argument("--periodic-noop-secs", type=float, default=10.0,
                        help="write a no-op history entry when nothing was written for this long, so idle change "
                             "streams advance (mongod's periodicNoopIntervalSecs, 10)")
    parser.add_argument("--bulk-write", action="store_true",
                        help="serve mongod 8.0's bulkWrite admin command and announce maxWireVersion 25 "
                             "(default: wire version 17, no bulkWrite)")
    parser.add_argument("--server-version", default="6.0", choices=["6.0", "7.0", "8.0"],
                        help="the mongod version to announce (buildInfo, hello's maxWireVersion 17, 21, 25) and "
                             "to behave as where versions differ: 7.0 and later serve $changeStreamSplitLargeEvent "
                             "(default 6.0; --bulk-write announces 8.0)")
    parser.add_argument("--members", type=int, default=1,
                        help="members of the replica set rs0, one per port (member 0 on --port is primary at "
                             "start; default 1)")
    parser.add_argument("--majority-lag-ms", type=float, default=0.0,
                        help="the majority commit point trails the last write by this many ms (default 0)")
    parser.add_argument("--secondary-lag-ms", type=float, default=0.0,
                        help="each secondary has applied the writes made up to this many ms ago (default 0)")
    parser.add_argument("--election-timeout-ms", type=float, default=10000.0,
                        help="without a primary, an election after this many ms (mongod's "
                             "electionTimeoutMillis, 10000)")
    parser.add_argument("--shards", type=int, default=0,
                        help="a sharded cluster of this many shards (each its own clock, history and data) "
                             "behind --routers mongos routers, one port each (default: no cluster)")
    parser.add_argument("--routers", type=int, default=1, help="mongos routers of the cluster (default 1)")
    parser.add_argument("--balancer-interval-secs", type=float, default=10.0,
                        help="the cluster's balancer runs a round this often (mongod's 10); 0: it starts "
                             "stopped, as after balancerStop (idxmongo/balancer.py)")
    parser.add_argument("--balancer-random-migrations", action="store_true",
                        help="the balancer moves a random chunk of each collection every round (the config "
                             "server's test-only fail point balancerShouldReturnRandomMigrations)")
    args = parser.parse_args(argv)
    if args.shards and (args.members > 1 or args.dbpath or args.bulk_write or args.majority_lag_ms
                        or args.secondary_lag_ms):
        parser.error("--shards does not combine with --members, --dbpath, --bulk-write or replication lags")
    if args.shards and args.routers < 1:
        parser.error("--routers must be at least 1")
    if args.members < 1:
        parser.error("--members must be at least 1")
    if bool(args.user) != bool(args.password):
        parser.error("--user and --password go together")
    return args


def main(argv=None):
    """Start the server and serve until a termination signal."""
    args = parse_args(argv)
    configure_logging(args.log)
    # The server holds many long-lived objects (documents, index entries, the change-stream history):
    # collect the youngest generation less often, or a bulk load spends a third of its time in the
    # collector (README, "Change streams": the cost of recording changes).
    gc.set_threshold(10000, 10, 10)
    if args.shards:
        return serve_cluster(args)
    try:
        server = Server(args.host, args.port, args.user, args.password, args.txn_lifetime, args.dbpath,
                        args.change_history if args.change_history > 0 else None, args.bulk_write,
                        args.server_version, args.members, args.majority_lag_ms, args.secondary_lag_ms,
                        args.election_timeout_ms)
    except (OSError, RuntimeError) as exc:
        sys.exit("mongo_test_server: --dbpath %s: %s" % (args.dbpath, exc))
    server.txn_size_limit = args.txn_size_limit or None
    server.noop_interval = max(0.1, args.periodic_noop_secs)
    server.profiler = profiling.from_environment()
    server.listen()
    if args.port_file:
        write_port_file(args.port_file, [member.port for member in server.repl.members])
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: server.stop())
    server.serve_forever()
    return 0


def serve_cluster(args):
    """A sharded cluster (idxmongo/cluster.py) until a termination signal."""
    from idxmongo.cluster import Cluster
    cluster = Cluster(args.host, args.port, args.user, args.password, args.shards, args.routers,
                      args.server_version, args.txn_lifetime,
                      args.change_history if args.change_history > 0 else None, args.balancer_interval_secs,
                      args.balancer_random_migrations)
    for shard in cluster.shards:
        shard.txn_size_limit = args.txn_size_limit or None
    cluster.set_noop_interval(max(0.1, args.periodic_noop_secs))
    cluster.listen()
    if args.port_file:
        write_port_file(args.port_file, cluster.ports())
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: cluster.stop())
    cluster.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
