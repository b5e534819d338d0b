"""Seeded benchmark data: customers and movies, generated and loaded with pymongo.

customers {_id, town, last_name, first_name, email, balance, age}
  town       90% "Redmond", the other 10% Zipf-distributed over ~300 tail towns
  last_name  ~3,000 names, Zipf-distributed (s = 1)
  first_name ~200 names, uniform
  email      unique, mixed case ("Ada.SMITH123@Example.com")
  balance    int 0..100,000
  age        int 18..99, missing for 5% (drawn from a random stream of its own, so
             that the other fields are those of a run without it)
movies {_id, title, year, actors}, size/10 of them, each with 3-8 distinct
  actors drawn (Zipf, s = 0.6) from a pool of 20,000 names.
ids_str, ids_oid, ids_mixed {_id, town, n}, size/4 of each: string _ids,
  ObjectId _ids, and both (every other one), for ORDER BY _id on text;
  town 10% "Seattle", else one of 50 others.

Everything derives from one seed, so every run loads the same documents; the
generator also keeps the value counts the scenarios need to pick their
constants (a rare, a medium and a common last name, a tail town, ...).
"""
import itertools
import random
from collections import Counter

from bson.objectid import ObjectId

SEED = 20260101
BATCH = 10000
REDMOND_SHARE = 0.90
NULL_AGE_SHARE = 0.05

_COMMON_LAST = [
    "Johnson", "Williams", "Brown", "Jones", "Smith", "Garcia", "Miller", "Davis",
    "Rodriguez", "Martinez", "Hernandez", "Lopez", "Gonzalez", "Wilson", "Anderson",
    "Thomas", "Taylor", "Moore", "Jackson", "Martin", "Lee", "Perez", "Thompson",
    "White", "Harris", "Sanchez", "Clark", "Ramirez", "Lewis", "Robinson", "Walker",
    "Young", "Allen", "King", "Wright", "Scott", "Torres", "Nguyen", "Hill", "Flores",
    "Green", "Adams", "Nelson", "Baker", "Hall", "Rivera", "Campbell", "Mitchell",
    "Carter", "Roberts", "Smyth", "Smalley", "Smart", "Smoot", "Kim", "Chen", "Patel",
    "Müller", "O'Brien", "Novak", "Kowalski", "Sato", "Ivanova", "Okafor", "Haddad"]
_SYL_A = ["Al", "Bar", "Cal", "Dor", "El", "Fen", "Gar", "Hal", "Ing", "Jor", "Kel",
          "Lor", "Mar", "Nor", "Or", "Pen", "Quin", "Ros", "Sm", "Tal", "Ul", "Van",
          "Wal", "Yar", "Zel", "Ash", "Brom", "Cor", "Dun", "Ev"]
_SYL_B = ["an", "en", "in", "on", "ar", "er", "or", "ich", "ov", "ett", "ley", "ford",
          "wood", "by", "ton", "son", "sen", "stein", "berg", "ski", "ez", "ini", "ard",
          "ell", "ham", "well", "ridge", "more", "field", "dale"]
_SYL_C = ["", "s", "e", "a", "o", "i", "y", "ie", "er", "es"]

_FIRST = [
    "Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Dennis",
    "Margaret", "Tim", "Radia", "Leslie", "Jim", "Linus", "Guido", "Bjarne", "Anita",
    "Hedy", "Katherine", "Dorothy", "Mary", "John", "Robert", "Michael", "William",
    "David", "Richard", "Joseph", "Thomas", "Charles", "Christopher", "Daniel",
    "Matthew", "Anthony", "Mark", "Paul", "Steven", "Andrew", "Kenneth", "Joshua",
    "Kevin", "Brian", "George", "Edward", "Ronald", "Jason", "Jeffrey", "Ryan",
    "Jacob", "Gary", "Nicholas", "Eric", "Jonathan", "Stephen", "Larry", "Justin",
    "Scott", "Brandon", "Benjamin", "Samuel", "Gregory", "Frank", "Alexander",
    "Raymond", "Patrick", "Jack", "Jerry", "Tyler", "Aaron", "Jose", "Adam", "Henry",
    "Nathan", "Douglas", "Zachary", "Peter", "Kyle", "Walter", "Ethan", "Jeremy",
    "Harold", "Keith", "Christian", "Roger", "Noah", "Gerald", "Carl", "Terry",
    "Sean", "Austin", "Arthur", "Lawrence", "Jesse", "Dylan", "Bryan", "Joe",
    "Jordan", "Billy", "Bruce", "Albert", "Willie", "Gabriel", "Logan", "Alan",
    "Juan", "Wayne", "Roy", "Ralph", "Randy", "Eugene", "Vincent", "Russell",
    "Elijah", "Louis", "Bobby", "Philip", "Johnny", "Patricia", "Jennifer", "Linda",
    "Elizabeth", "Susan", "Jessica", "Sarah", "Karen", "Nancy", "Lisa", "Betty",
    "Sandra", "Ashley", "Kimberly", "Emily", "Donna", "Michelle", "Carol", "Amanda",
    "Melissa", "Deborah", "Stephanie", "Rebecca", "Sharon", "Laura", "Cynthia",
    "Kathleen", "Amy", "Shirley", "Angela", "Helen", "Anna", "Brenda", "Pamela",
    "Nicole", "Emma", "Samantha", "Christine", "Debra", "Rachel", "Catherine",
    "Carolyn", "Janet", "Ruth", "Maria", "Heather", "Diane", "Virginia", "Julie",
    "Joyce", "Victoria", "Olivia", "Kelly", "Christina", "Lauren", "Joan", "Evelyn",
    "Judith", "Megan", "Cheryl", "Andrea", "Hannah", "Martha", "Jacqueline", "Gloria",
    "Teresa", "Ann", "Sara", "Madison", "Kathryn", "Janice", "Jean", "Abigail",
    "Alice", "Julia", "Judy", "Sophia", "Zoë", "Søren", "Björn", "Chloé", "José"]

_TOWN_REAL = [
    "Seattle", "Bellevue", "Kirkland", "Bothell", "Renton", "Tacoma", "Everett",
    "Issaquah", "Sammamish", "Woodinville", "Kent", "Auburn", "Spokane", "Yakima",
    "Olympia", "Walla Walla", "Pullman", "Bellingham", "Vancouver", "Wenatchee",
    "Ellensburg", "Leavenworth", "Port Angeles", "Anacortes", "Mount Vernon",
    "Lynnwood", "Edmonds", "Shoreline", "Burien", "Federal Way", "Puyallup",
    "Lakewood", "Bremerton", "Poulsbo", "Snoqualmie", "North Bend", "Duvall",
    "Carnation", "Monroe", "Marysville", "Arlington", "Stanwood", "Oak Harbor",
    "Coupeville", "Sequim", "Aberdeen", "Longview", "Kelso", "Centralia", "Chehalis"]
_TOWN_ROOT = ["Cedar", "Maple", "Pine", "Fir", "Elk", "Bear", "Eagle", "Salmon",
              "Silver", "Granite", "Willow", "Alder", "Spruce", "Hawk", "Otter", "Fox",
              "Raven", "Crystal", "Orchard", "Prairie"]
_TOWN_SUFFIX = [" Falls", " Creek", " Valley", " Ridge", " Harbor", " Lake", " Springs",
                " Point", "ton", " Grove", " Hill", " Bay", " Crossing"]

N_TAIL_TOWNS = 300
N_LAST_NAMES = 3000
N_ACTORS = 20000


def _zipf_cum(n, s):
    """Cumulative Zipf weights for ranks 1..n."""
    return list(itertools.accumulate(1.0 / (r ** s) for r in range(1, n + 1)))


def _last_names(rng):
    names = list(_COMMON_LAST)
    seen = set(names)
    synth = [a + b + c for a in _SYL_A for b in _SYL_B for c in _SYL_C]
    rng.shuffle(synth)
    for name in synth:
        if len(names) >= N_LAST_NAMES:
            break
        if name not in seen:
            seen.add(name)
            names.append(name)
    return names


def _tail_towns(rng):
    towns = list(_TOWN_REAL)
    synth = [r + s for r in _TOWN_ROOT for s in _TOWN_SUFFIX]
    rng.shuffle(synth)
    towns += synth[:N_TAIL_TOWNS - len(towns)]
    return towns


def _actor_pool(rng):
    firsts = sorted(set(_FIRST))
    pool = set()
    surnames = _last_names(random.Random(SEED + 1))
    while len(pool) < N_ACTORS:
        pool.add("%s %s" % (rng.choice(firsts), rng.choice(surnames)))
    pool = sorted(pool)
    rng.shuffle(pool)
    return pool


_EMAIL_STYLES = (
    lambda f, l: "%s.%s" % (f, l),
    lambda f, l: "%s.%s" % (f.lower(), l.lower()),
    lambda f, l: "%s.%s" % (f.upper(), l.upper()),
    lambda f, l: "%s%s" % (f[0], l.upper()),
    lambda f, l: "%s_%s" % (f.lower(), l),
)
_DOMAINS = ("Example.com", "example.COM", "Mail.Example.org", "EXAMPLE.net")


class Dataset:
    """The generated data of one size, plus the statistics scenarios need."""

    def __init__(self, size, seed=SEED):
        self.size = size
        self.n_movies = max(1, size // 10)
        self.seed = seed
        rng = random.Random(seed)
        self.last_names = _last_names(rng)
        self.tail_towns = _tail_towns(rng)
        self.actors = _actor_pool(rng)
        self.town_counts = Counter()
        self.last_counts = Counter()
        self.town_last_counts = Counter()
        self.actor_counts = Counter()
        self.emails = {}            # a sample: _id -> email, for lookups and orders
        self.null_ages = 0
        self.id_texts = {}          # ids_<kind>: the _ids as text, in byte order

    def customers(self):
        """Yield lists of up to BATCH customer documents."""
        rng = random.Random(self.seed * 7 + 1)
        ages = random.Random(self.seed * 7 + 3)
        last_cum = _zipf_cum(len(self.last_names), 1.0)
        town_cum = _zipf_cum(len(self.tail_towns), 1.0)
        firsts = _FIRST
        tail = self.tail_towns
        lasts = self.last_names
        for start in range(1, self.size + 1, BATCH):
            k = min(BATCH, self.size + 1 - start)
            last = rng.choices(lasts, cum_weights=last_cum, k=k)
            tails = rng.choices(tail, cum_weights=town_cum, k=k)
            batch = []
            for i in range(k):
                cid = start + i
                town = "Redmond" if rng.random() < REDMOND_SHARE else tails[i]
                first = firsts[rng.randrange(len(firsts))]
                ln = last[i]
                style = _EMAIL_STYLES[rng.randrange(len(_EMAIL_STYLES))]
                email = "%s%d@%s" % (style(first, ln.replace("'", "")), cid,
                                     _DOMAINS[rng.randrange(len(_DOMAINS))])
                batch.append({"_id": cid, "town": town, "last_name": ln,
                              "first_name": first, "email": email,
                              "balance": rng.randrange(100001)})
                if ages.random() < NULL_AGE_SHARE:
                    self.null_ages += 1
                else:
                    batch[-1]["age"] = ages.randrange(18, 100)
                self.town_counts[town] += 1
                self.last_counts[ln] += 1
                self.town_last_counts[(town, ln)] += 1
                if cid % 97 == 0 or cid <= 2000:
                    self.emails[cid] = email
            yield batch

    def movies(self):
        """Yield lists of up to BATCH movie documents."""
        rng = random.Random(self.seed * 7 + 2)
        actor_cum = _zipf_cum(len(self.actors), 0.6)
        words = ["Night", "River", "Storm", "Garden", "Empire", "Shadow", "Summer",
                 "Winter", "Machine", "Island", "Letter", "Road", "Secret", "Fire"]
        adjs = ["Last", "Silent", "Golden", "Broken", "Hidden", "Lost", "Red", "Long"]
        for start in range(1, self.n_movies + 1, BATCH):
            k = min(BATCH, self.n_movies + 1 - start)
            batch = []
            for i in range(k):
                mid = start + i
                want = rng.randint(3, 8)
                cast = []
                while len(cast) < want:
                    for a in rng.choices(self.actors, cum_weights=actor_cum, k=want):
                        if a not in cast and len(cast) < want:
                            cast.append(a)
                for a in cast:
                    self.actor_counts[a] += 1
                batch.append({"_id": mid, "title": "The %s %s %d" % (
                    rng.choice(adjs), rng.choice(words), mid),
                    "year": rng.randint(1920, 2024), "actors": cast})
            yield batch

    def id_documents(self, kind):
        """Yield lists of up to BATCH documents of ids_<kind> (str, oid, mixed); note
        the _ids as text, in PostgreSQL's byte order, in self.id_texts[kind]."""
        rng = random.Random(self.seed * 7 + {"str": 3, "oid": 4, "mixed": 5}[kind])
        n = max(1, self.size // 4)
        texts = []
        for start in range(0, n, BATCH):
            batch = []
            for i in range(start, min(n, start + BATCH)):
                as_oid = kind == "oid" or (kind == "mixed" and i % 2 == 1)
                if as_oid:
                    _id = ObjectId("%08x%016x" % (1700000000 + i, rng.getrandbits(64)))
                    texts.append(str(_id))
                else:
                    # hex-looking and other strings, so that both kinds interleave in byte order
                    _id = "%s%07d" % (rng.choice("0123456789abcdefgXYZ"), rng.randrange(10 ** 7))
                    texts.append(_id)
                town = "Seattle" if rng.random() < 0.1 else _TOWN_REAL[1 + rng.randrange(49)]
                batch.append({"_id": _id, "town": town, "n": i})
            yield batch
        texts = sorted(set(texts), key=lambda t: t.encode())
        self.id_texts[kind] = texts

    # -- constants for the scenarios (call after loading) --

    def last_name_at(self, target):
        """The last name whose count is closest to target (ties: by name)."""
        return min(self.last_counts.items(), key=lambda kv: (abs(kv[1] - target), kv[0]))[0]

    def tail_town_at(self, target):
        """The tail town whose count is closest to target."""
        return min(((t, c) for t, c in self.town_counts.items() if t != "Redmond"),
                   key=lambda kv: (abs(kv[1] - target), kv[0]))[0]

    def actor_at(self, target):
        """The actor whose movie count is closest to target."""
        return min(self.actor_counts.items(), key=lambda kv: (abs(kv[1] - target), kv[0]))[0]

    def last_name_in_town(self, town):
        """The most frequent last name among the town's customers."""
        best = max(((ln, c) for (t, ln), c in self.town_last_counts.items() if t == town),
                   key=lambda kv: (kv[1], kv[0]))
        return best[0]


def load(db, data, log=print):
    """Drop and load the collections; return {collection: seconds}."""
    import time
    times = {}
    for name, gen in (("customers", data.customers), ("movies", data.movies),
                      ("ids_str", lambda: data.id_documents("str")),
                      ("ids_oid", lambda: data.id_documents("oid")),
                      ("ids_mixed", lambda: data.id_documents("mixed"))):
        db.drop_collection(name)
        coll = db[name]
        t0 = time.monotonic()
        n = 0
        for batch in gen():
            coll.insert_many(batch, ordered=False)
            n += len(batch)
        times[name] = time.monotonic() - t0
        log("  loaded %d %s in %.1f s (%.0f docs/s)" % (n, name, times[name], n / max(times[name], 1e-9)))
    return times
