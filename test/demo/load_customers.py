#!/usr/bin/python3
"""Load the demo's customers collection into database idxtable_demo.

10,000 customers with a customer id as _id, a town (skewed: most live in a
few towns), a last name, a first name and an e-mail address.  Seeded, so
every run shows the same data.
"""
import random
import sys

sys.path.insert(0, __file__.rsplit("/", 3)[0] + "/test/fixtures")
import mongo_client  # noqa: E402

TOWNS = ["Redmond"] * 40 + ["Seattle"] * 30 + ["Bellevue"] * 15 + [
    "Kirkland", "Bothell", "Renton", "Tacoma", "Everett", "Issaquah",
    "Sammamish", "Woodinville", "Kent", "Auburn", "Spokane", "Yakima",
    "Olympia", "Walla Walla", "Pullman"]
LAST = ["Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller",
        "Davis", "Rodriguez", "Martinez", "Nguyen", "Kim", "Chen", "Patel",
        "Müller", "O'Brien"]
FIRST = ["Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances",
         "Ken", "Dennis", "Margaret", "Tim", "Radia", "Leslie", "Jim"]


def customers(n=10000):
    """Generate n customer documents."""
    rng = random.Random(2026)
    for cid in range(1, n + 1):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        doc = {"_id": cid, "town": rng.choice(TOWNS), "last_name": last,
               "first_name": first,
               "email": "%s.%s%d@example.com" % (first, last.replace("'", ""), cid)}
        if cid % 97 == 0:
            del doc["email"]            # some customers gave no e-mail
        yield doc


def main():
    """Drop and reload the demo database."""
    client = mongo_client.connect()
    client.drop_database("idxtable_demo")
    db = mongo_client.database(client, "idxtable_demo")
    db.customers.insert_many(list(customers()))
    print("loaded %d customers into idxtable_demo.customers"
          % db.customers.count_documents({}))


if __name__ == "__main__":
    main()
