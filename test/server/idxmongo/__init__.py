"""idxmongo: a MongoDB-wire-compatible test server (OP_MSG, indexes with honest examined counters,
transactions, SCRAM auth, failCommand) over an in-memory store, using mongomock for query matching,
update operators and aggregation stages."""
