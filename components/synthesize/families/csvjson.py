"""CSV and JSON wrangling: jq lookups, filtered sums, conversions, joins with quoted fields.

easy    read one value out of a JSON file (one jq command)
medium  sum a CSV column under a filter, or convert a CSV to a JSON array with typed fields
hard    join a CSV (quoted fields with commas) with a JSON file into a sorted CSV report
"""

from __future__ import annotations

import csv
import io
import json
import random

from components.synthesize.draft import Draft, py_literal
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import (
    NOUNS,
    PEOPLE,
    WORDS,
    base_dir,
    name,
    names,
    version,
)

__all__ = ["TAGS", "generate"]

TAGS = ["csv", "json", "jq", "data-wrangling"]


def _easy(rng: random.Random) -> Draft:
    folder = f"{base_dir(rng)}/{name(rng)}"
    path = f"{folder}/{rng.choice(['config', 'package', 'settings', 'manifest'])}.json"
    section, key = (
        rng.choice(["server", "database", "build", "release"]),
        rng.choice(["version", "host", "owner"]),
    )
    value = {"version": version(rng), "host": f"{name(rng)}.internal", "owner": rng.choice(PEOPLE)}[
        key
    ]
    doc = {
        "name": name(rng),
        section: {key: value, "enabled": rng.random() < 0.5, "port": rng.randint(1024, 9999)},
        "tags": names(rng, 3, WORDS),
    }
    for other in names(rng, 2, ["logging", "cache", "auth", "metrics"]):
        doc[other] = {"level": rng.choice(["info", "debug"]), key: "not-this-one"}
    out = f"{folder}/{key}.txt"
    instruction, style, phrasings = say(
        rng,
        request=f"Write the value of `{section}.{key}` from the JSON file {path} to {out} (just "
        "the value, no quotes).",
        report=f"A deploy script needs the `{key}` setting of the `{section}` section in {path}, "
        f"and parsing JSON in bash keeps going wrong. Please pull it out into {out}: the bare "
        "value, without quotes or anything else.",
        ticket=f"{path}: `.{section}.{key}` -> {out}, raw value, no quotes.",
    )
    return Draft(
        instruction=instruction,
        solution=f"jq -r '.{section}.{key}' {path} > {out}",
        tags=["lookup"],
        setup_files={"doc.json": json.dumps(doc, indent=2) + "\n"},
        setup_script=f"mkdir -p {folder}\ncp doc.json {path}",
        check_py=f"""
got = read({out!r}).strip()
check(got == {value!r}, "{out} says %r" % got)
""",
        uses=("jq",),
        metadata={"key": f"{section}.{key}", "phrasing": style, "phrasings": phrasings},
    )


def _sales(rng: random.Random, n: int) -> tuple[list[str], list[dict]]:
    regions = names(rng, 4, ["north", "south", "east", "west", "central", "coast"])
    rows = [
        {
            "id": i + 1,
            "product": rng.choice(NOUNS),
            "region": rng.choice(regions),
            "units": rng.randint(1, 50),
            "amount": rng.randint(5, 900),
        }
        for i in range(n)
    ]
    return regions, rows


def _to_csv(header: list[str], rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=header, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def _medium(rng: random.Random) -> Draft:
    folder = f"{base_dir(rng)}/{name(rng)}"
    src = f"{folder}/sales.csv"
    regions, rows = _sales(rng, rng.randint(15, 30))
    header = ["id", "product", "region", "units", "amount"]
    rng.shuffle(header)
    if rng.random() < 0.5:
        region = regions[0]
        rows.append(
            {"id": len(rows) + 1, "product": "extra", "region": region, "units": 1, "amount": 7}
        )
        total = sum(r["amount"] for r in rows if r["region"] == region)
        out = f"{folder}/{region}-total.txt"
        instruction, style, phrasings = say(
            rng,
            request=f"{src} has a header row. Sum the `amount` column over the rows whose "
            f"`region` is `{region}` and write just the total (an integer) to {out}.",
            report=f"Finance is asking what the `{region}` region brought in, and the only source "
            f"is {src} (first line is the header). Add up `amount` for every row with `region` = "
            f"`{region}` and put the total in {out} as a plain integer, nothing else.",
            ticket=f"{src} (header row): sum(amount) where region == {region} -> {out}, integer "
            "only.",
        )
        solution = f"""
python3 -c "
import csv
rows = csv.DictReader(open('{src}'))
print(sum(int(r['amount']) for r in rows if r['region'] == '{region}'))
" > {out}
"""
        check = f"""
got = read({out!r}).strip()
check(got == {str(total)!r}, "{out} says %r" % got)
"""
        variant = "filtered-sum"
    else:
        out = f"{folder}/sales.json"
        instruction, style, phrasings = say(
            rng,
            request=f"Convert {src} (with a header row) to {out}: a JSON array with one object "
            "per row, keyed by the header names, in the same order as the rows. `id`, `units` and "
            "`amount` must be JSON numbers; the other fields stay strings.",
            report=f"The new dashboard only reads JSON, so it can't use {src}. Please turn that "
            f"CSV (its first line is the header) into {out}, a JSON array holding one object per "
            "row in the original row order, with the header names as keys. A naive conversion "
            "turns every value into a string and the charts choke on that: `id`, `units` and "
            "`amount` have to be real JSON numbers, the other fields stay strings.",
            ticket=f"{src} (header) -> {out}: JSON array, one object per row, same order, keys = "
            "header names. id/units/amount as JSON numbers, other fields strings.",
        )
        solution = f"""
python3 -c "
import csv, json
rows = [dict(r, id=int(r['id']), units=int(r['units']), amount=int(r['amount'])) for r in csv.DictReader(open('{src}'))]
json.dump(rows, open('{out}', 'w'), indent=2)
"
"""
        check = f"""
try:
    got = json.loads(read({out!r}))
except ValueError as e:
    fail("{out} is not JSON: %s" % e)
check(got == {py_literal(rows)}, "{out} does not hold the rows with typed fields")
"""
        variant = "csv-to-json"
    # Look at the header and a few rows, act, check the result.
    solution = f"head -n 4 {src}\n{solution.strip()}\nhead -c 600 {out}"
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=[variant],
        setup_files={"sales.csv": _to_csv(header, rows)},
        setup_script=f"mkdir -p {folder}\ncp sales.csv {src}",
        check_py=check,
        metadata={
            "variant": variant,
            "rows": len(rows),
            "phrasing": style,
            "phrasings": phrasings,
        },
    )


def _hard(rng: random.Random) -> Draft:
    folder = f"{base_dir(rng)}/{name(rng)}"
    users_csv, orders_json, out = (
        f"{folder}/users.csv",
        f"{folder}/orders.json",
        f"{folder}/report.csv",
    )
    people = rng.sample(PEOPLE, k=rng.randint(6, 10))
    users = [
        {
            "user_id": 100 + i,
            "name": f"{p.title()}, {rng.choice(NOUNS).title()}",
            "city": rng.choice(NOUNS),
        }
        for i, p in enumerate(people)
    ]
    orders, totals = [], {}
    for i in range(rng.randint(15, 30)):
        u = rng.choice(users[:-2])  # the last two users never order
        cents = rng.randint(100, 50000)
        orders.append({"order": f"o-{i:04d}", "user": u["user_id"], "price_cents": cents})
        n, t = totals.get(u["user_id"], (0, 0))
        totals[u["user_id"]] = (n + 1, t + cents)
    for uid in sorted(totals):  # distinct totals: the order of the report is then unambiguous
        while any(o != uid and t == totals[uid][1] for o, (_, t) in totals.items()):
            orders.append({"order": f"o-{len(orders):04d}", "user": uid, "price_cents": 1})
            totals[uid] = (totals[uid][0] + 1, totals[uid][1] + 1)
    by_id = {u["user_id"]: u for u in users}
    expected = [
        [str(uid), by_id[uid]["name"], str(n), f"{t / 100:.2f}"]
        for uid, (n, t) in sorted(totals.items(), key=lambda kv: -kv[1][1])
    ]
    instruction, style, phrasings = say(
        rng,
        request=f"{users_csv} lists users (`user_id,name,city`; names contain commas and are "
        f"quoted) and {orders_json} is a JSON array of orders (`order`, `user`, `price_cents`). "
        f"Write {out}, a CSV with the header `user_id,name,orders,total` and one row per user who "
        "placed at least one order: their name, their number of orders, and the sum of their "
        "order prices in currency units with exactly two decimals (e.g. 12.50). Sort the rows by "
        "total, largest first. Quote fields as CSV requires.",
        report="Accounting wants to know who our biggest customers are. The users are in "
        f"{users_csv} (columns `user_id,name,city`; the names contain commas, so they are quoted, "
        f"and a naive split on commas breaks) and the orders in {orders_json}, a JSON array of "
        f"objects with `order`, `user` and `price_cents`. Please produce {out} as a CSV with the "
        "header `user_id,name,orders,total`: one row for every user who has at least one order, "
        "giving their id, their name, how many orders they placed and what those orders add up to "
        "in currency units, always with two decimals (12.50, not 12.5 or 1250). Biggest total at "
        "the top, and quote the fields properly so the names survive.",
        ticket=f"Join {users_csv} (user_id,name,city; quoted names with commas) with "
        f"{orders_json} (array of order, user, price_cents) -> {out}. Header "
        "`user_id,name,orders,total`; one row per user with >= 1 order; orders = count, total = "
        "sum(price_cents)/100, exactly 2 decimals (e.g. 12.50). Sort by total desc. Proper CSV "
        "quoting.",
    )
    solution = f"""
python3 - <<'PY'
import csv, json
users = {{r["user_id"]: r for r in csv.DictReader(open("{users_csv}"))}}
stats = {{}}
for o in json.load(open("{orders_json}")):
    n, t = stats.get(str(o["user"]), (0, 0))
    stats[str(o["user"])] = (n + 1, t + o["price_cents"])
with open("{out}", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["user_id", "name", "orders", "total"])
    for uid, (n, t) in sorted(stats.items(), key=lambda kv: -kv[1][1]):
        w.writerow([uid, users[uid]["name"], n, "%.2f" % (t / 100)])
PY
"""
    check = f"""
import csv
rows = list(csv.reader(read({out!r}).splitlines()))
check(rows and rows[0] == ["user_id", "name", "orders", "total"], "bad header: %r" % (rows[:1],))
check(rows[1:] == {py_literal(expected)}, "report rows are %r" % (rows[1:],))
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["join", "quoting"],
        setup_files={
            "users.csv": _to_csv(["user_id", "name", "city"], users),
            "orders.json": json.dumps(orders, indent=1) + "\n",
        },
        setup_script=f"mkdir -p {folder}\ncp users.csv {users_csv}\ncp orders.json {orders_json}",
        check_py=check,
        metadata={
            "users": len(users),
            "orders": len(orders),
            "phrasing": style,
            "phrasings": phrasings,
        },
        agent_timeout_sec=900.0,
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One CSV/JSON task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
