"""The benchmark's queries, with constants picked from the generated data.

Each scenario is run twice by bench.py: with index routing (path "index") and
with SET idxtable.enable_index_routing = off (path "plain").
"""


def lit(value):
    """A SQL string literal."""
    return "'" + str(value).replace("'", "''") + "'"


class Scenario:
    def __init__(self, key, sql, note=""):
        self.key = key
        self.sql = sql
        self.note = note


def build(d):
    """The scenarios for Dataset d (loaded, so its value counts are known)."""
    n = d.size
    rare = d.last_name_at(3)
    medium = d.last_name_at(max(10, n // 500))            # ~0.2%
    common = d.last_counts.most_common(1)[0][0]             # ~12%
    t_comp = d.tail_town_at(max(20, n // 500))              # ~0.2%
    t_first = d.tail_town_at(max(10, n // 1000))            # ~0.1%
    t_cover = d.tail_town_at(max(10, n // 2000))            # ~0.05%
    t_rare = d.tail_town_at(max(3, n // 20000))             # ~0.005%
    ln_comp = d.last_name_in_town(t_comp)
    some_id = sorted(d.emails)[len(d.emails) // 2]
    email = d.emails[some_id].lower()
    actor = d.actor_at(max(3, d.n_movies // 500))
    star = "SELECT * FROM customers WHERE "

    def cnt(c, k):
        return "%s = %d rows" % (k, c)

    return [
        Scenario("point lower(email)", star + "lower(email) = %s" % lit(email),
                 "unique key, 1 row"),
        Scenario("last_name rare", star + "last_name = %s" % lit(rare),
                 cnt(d.last_counts[rare], rare)),
        Scenario("last_name medium", star + "last_name = %s" % lit(medium),
                 cnt(d.last_counts[medium], medium)),
        Scenario("last_name common", star + "last_name = %s" % lit(common),
                 cnt(d.last_counts[common], common)),
        Scenario("town+last_name", star + "town = %s AND last_name = %s" % (lit(t_comp), lit(ln_comp)),
                 "composite, both keys; " + cnt(d.town_counts[t_comp], t_comp)),
        Scenario("town (1st key)", star + "town = %s" % lit(t_first),
                 "composite, first key only; " + cnt(d.town_counts[t_first], t_first)),
        Scenario("town+last_name range", star + "town = %s AND last_name BETWEEN 'A' AND 'C'" % lit(t_comp),
                 "equality prefix + range (default collation)"),
        Scenario("last_name range C", "SELECT * FROM customers WHERE last_name COLLATE \"C\" >= 'Sm' "
                 "AND last_name COLLATE \"C\" < 'Sn'", "range on a single key"),
        Scenario("covering", "SELECT first_name, last_name FROM customers WHERE town = %s" % lit(t_cover),
                 "INCLUDE (first_name, last_name); " + cnt(d.town_counts[t_cover], t_cover)),
        Scenario("key-only (same town)", star + "town = %s" % lit(t_cover),
                 "same town, all columns"),
        Scenario("join orders", "SELECT o.order_id, c.customer_id, c.last_name FROM orders o "
                 "JOIN customers c ON c.email = o.email WHERE o.order_id < 50",
                 "49 orders joined on exact-case email"),
        Scenario("skew: Redmond", star + "town = 'Redmond'",
                 cnt(d.town_counts["Redmond"], "Redmond")),
        Scenario("skew: rare town", star + "town = %s" % lit(t_rare), cnt(d.town_counts[t_rare], t_rare)),
        Scenario("multi-valued actors", "SELECT * FROM movies WHERE %s = ANY(actors)" % lit(actor),
                 cnt(d.actor_counts[actor], actor)),
    ]
