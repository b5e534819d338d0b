#!/usr/bin/python3
"""The demo's other application: writes customers straight to MongoDB with pymongo.

Run by demo.sql (\\!) between two looks at idxtable.sync_status: inserts two
customers and moves a third one (customer 4242) to another town, last name
and e-mail address, without PostgreSQL knowing.  The next query routed
through an index table must find all three as they are now.
"""
import sys

sys.path.insert(0, __file__.rsplit("/", 3)[0] + "/test/fixtures")
import mongo_client  # noqa: E402

NEW = [
    {"_id": 900101, "town": "Pullman", "last_name": "Hopper", "first_name": "Grace",
     "email": "Grace.Hopper@Navy.example"},
    {"_id": 900102, "town": "Walla Walla", "last_name": "Lovelace", "first_name": "Ada",
     "email": "Countess@Analytical.example"},
]
MOVED = (4242, {"town": "Walla Walla", "last_name": "Lovelace",
                "email": "Ada.Lovelace@Engine.example"})


def main():
    """Write, and say what was written."""
    client = mongo_client.connect()
    coll = mongo_client.database(client, "idxtable_demo").customers
    coll.insert_many(NEW)
    cid, changes = MOVED
    res = coll.update_one({"_id": cid}, {"$set": changes})
    if res.modified_count != 1:
        sys.exit("outside_writes.py: customer %d was not updated" % cid)
    print("pymongo, another application: inserted customers %s and moved customer %d to "
          "%s (last name %s, e-mail %s); MongoDB acknowledged both writes"
          % (" and ".join(str(d["_id"]) for d in NEW), cid, changes["town"],
             changes["last_name"], changes["email"]))


if __name__ == "__main__":
    main()
