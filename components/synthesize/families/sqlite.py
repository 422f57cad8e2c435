"""SQL with sqlite: queries, joins and aggregates, then schema work (index, view, data fixes).

easy    one COUNT query whose answer goes to a file (one sqlite3 command)
medium  a join + GROUP BY + ORDER BY + LIMIT exported as CSV with a header
hard    clean bad rows, add an index and a live view; the check inserts rows and reads the view

Databases are built at image build time from SQL text with Python's sqlite3
module, so the set-up works even where the sqlite3 CLI is missing.
"""

from __future__ import annotations

import random

from components.synthesize.draft import Draft
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import NOUNS, PEOPLE, base_dir, name

__all__ = ["TAGS", "generate"]

TAGS = ["sql", "sqlite", "database"]

BUILD_DB = "python3 -c \"import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.executescript(open('schema.sql').read()); c.commit()\" {db}"


def _q(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _shop(rng: random.Random) -> tuple[list[tuple], list[tuple], str]:
    """Customers and orders (distinct per-customer totals) and the SQL that creates them."""
    customers = [
        (i + 1, p.title(), rng.choice(["DE", "FR", "JP", "BR", "US", "IN"]))
        for i, p in enumerate(rng.sample(PEOPLE, rng.randint(6, 10)))
    ]
    orders, totals = [], {}
    for i in range(rng.randint(20, 40)):
        cid, amount = (
            rng.choice(customers[:-1])[0],
            rng.randint(5, 500),
        )  # the last customer never orders
        while totals.get(cid, 0) + amount in [t for c, t in totals.items() if c != cid]:
            amount += 1
        totals[cid] = totals.get(cid, 0) + amount
        orders.append(
            (i + 1, cid, amount, f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}")
        )
    sql = [
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT);",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id), "
        "amount INTEGER NOT NULL, created_at TEXT);",
    ]
    sql += [f"INSERT INTO customers VALUES ({i}, {_q(n)}, {_q(c)});" for i, n, c in customers]
    sql += [f"INSERT INTO orders VALUES ({i}, {c}, {a}, {_q(d)});" for i, c, a, d in orders]
    return customers, orders, "\n".join(sql) + "\n"


def _db_path(rng: random.Random) -> str:
    return f"{base_dir(rng)}/{name(rng)}/{rng.choice(['shop', 'store', 'sales', 'app'])}.db"


def _easy(rng: random.Random) -> Draft:
    db, table = _db_path(rng), rng.choice(["accounts", "subscriptions", "devices", "tickets"])
    col, value = rng.choice([("status", "active"), ("status", "open"), ("state", "enabled")])
    others = ["inactive", "closed", "pending", "disabled"]
    rows = [
        (i + 1, f"{rng.choice(NOUNS)}-{i}", value if rng.random() < 0.4 else rng.choice(others))
        for i in range(rng.randint(15, 40))
    ]
    count = sum(1 for r in rows if r[2] == value)
    sql = f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, name TEXT, {col} TEXT);\n"
    sql += "".join(f"INSERT INTO {table} VALUES ({i}, {_q(n)}, {_q(s)});\n" for i, n, s in rows)
    answer = f"/root/{table}-{value}.txt"
    instruction, style, phrasings = say(
        rng,
        request=f"How many rows of the table `{table}` in the SQLite database {db} have `{col}` "
        f"equal to '{value}'? Write just the number to {answer}.",
        report=f"The dashboard's count of {value} {table} looks wrong to me and I want the real "
        f"figure straight from the SQLite database {db}: the number of rows in `{table}` whose "
        f"`{col}` is '{value}'. Please put that number, and nothing else, in {answer}.",
        ticket=f"SQLite {db}: count rows of `{table}` where `{col}` = '{value}'. Number only -> "
        f"{answer}.",
    )
    return Draft(
        instruction=instruction,
        solution=f"sqlite3 {db} \"SELECT COUNT(*) FROM {table} WHERE {col} = '{value}';\" > {answer}",
        tags=["count", "select"],
        setup_files={"schema.sql": sql},
        setup_script=f"mkdir -p $(dirname {db})\n{BUILD_DB.format(db=db)}",
        check_py=f"""
check(read({answer!r}).strip() == {str(count)!r}, "{answer} says %r" % read({answer!r}).strip())
""",
        uses=("sqlite3",),
        metadata={"table": table, "rows": len(rows), "phrasing": style, "phrasings": phrasings},
    )


def _medium(rng: random.Random) -> Draft:
    db = _db_path(rng)
    customers, orders, sql = _shop(rng)
    k = rng.choice([3, 4, 5])
    totals: dict[int, int] = {}
    for _, cid, amount, _ in orders:
        totals[cid] = totals.get(cid, 0) + amount
    names = {cid: n for cid, n, _ in customers}
    top = sorted(totals, key=lambda c: -totals[c])[:k]
    expected = [["name", "total"]] + [[names[c], str(totals[c])] for c in top]
    out = f"/root/top{k}-customers.csv"
    instruction, style, phrasings = say(
        rng,
        request=f"The SQLite database {db} has tables `customers(id, name, country)` and "
        f"`orders(id, customer_id, amount, created_at)`. Write {out}: a CSV with the header "
        f"`name,total` and the {k} customers with the largest sum of order amounts, largest first.",
        report=f"Sales asked for our top {k} customers by how much they have ordered in total, and "
        f"the numbers only live in the SQLite database {db} (tables `customers(id, name, country)` "
        f"and `orders(id, customer_id, amount, created_at)`). Could you export them to {out} as "
        "CSV? Header `name,total`, where total is the sum of that customer's order amounts, "
        "biggest spender first.",
        ticket=f"{db} (SQLite; customers(id, name, country), orders(id, customer_id, amount, "
        f"created_at)): top {k} customers by SUM(amount) -> {out}. CSV, header `name,total`, "
        "descending.",
    )
    query = (
        "SELECT c.name AS name, SUM(o.amount) AS total FROM customers c JOIN orders o ON o.customer_id = c.id "
        f"GROUP BY c.id ORDER BY total DESC LIMIT {k};"
    )
    return Draft(
        instruction=instruction,
        # Look at the schema (read-only), act, check the CSV.
        solution=f"sqlite3 -readonly {db} .schema\n"
        f'sqlite3 -header -csv {db} "{query}" > {out}\n'
        f"cat {out}",
        tags=["join", "group-by", "csv"],
        setup_files={"schema.sql": sql},
        setup_script=f"mkdir -p $(dirname {db})\n{BUILD_DB.format(db=db)}",
        check_py=f"""
import csv
rows = [r for r in csv.reader(read({out!r}).splitlines()) if r]
check(rows == {expected!r}, "{out} holds %r" % rows)
""",
        uses=("sqlite3",),
        metadata={"k": k, "orders": len(orders), "phrasing": style, "phrasings": phrasings},
    )


def _hard(rng: random.Random) -> Draft:
    db = _db_path(rng)
    customers, orders, sql = _shop(rng)
    bad = rng.sample(range(len(orders) + 1, len(orders) + 40), rng.randint(2, 5))
    sql += "".join(
        f"INSERT INTO orders VALUES ({i}, {customers[0][0]}, -{rng.randint(1, 99)}, '2024-13-01');\n"
        for i in bad
    )
    view = rng.choice(
        ["customer_stats", "customer_totals", "v_customer_summary", "report_by_customer"]
    )
    n_col = rng.choice(["order_count", "orders", "n_orders", "num_orders"])
    t_col = rng.choice(["total_amount", "total", "revenue", "amount_sum"])
    index = f"idx_orders_{rng.choice(['customer', 'cust', 'by_customer'])}"
    instruction, style, phrasings = say(
        rng,
        request=f"Clean up and extend the SQLite database {db} (tables `customers(id, name, "
        "country)` and `orders(id, customer_id, amount, created_at)`): 1) delete the orders with a "
        "negative amount (data errors), leaving every other order alone; 2) add an index named "
        f"`{index}` on `orders(customer_id)`; 3) create a view `{view}` with the columns "
        f"`customer_id, name, {n_col}, {t_col}`, one row per customer — customers without orders "
        "included, with 0 and 0 — that always reflects the current contents of the tables.",
        report=f"A bad import left orders with negative amounts in the SQLite database {db}, and "
        "the per-customer numbers people pull by hand are both wrong and slow. The tables are "
        "`customers(id, name, country)` and `orders(id, customer_id, amount, created_at)`. Please "
        "remove the orders whose amount is negative (and no other rows), add an index called "
        f"`{index}` on `orders(customer_id)`, and give us a view `{view}` with the columns "
        f"`customer_id, name, {n_col}, {t_col}`: one row for every customer, those with no orders "
        "showing 0 and 0, computed from whatever the tables hold at query time, not a copy of "
        "today's data.",
        ticket=f"SQLite {db}; customers(id, name, country), orders(id, customer_id, amount, "
        f"created_at). 1) delete orders with amount < 0, nothing else. 2) index `{index}` on "
        f"orders(customer_id). 3) view `{view}`: customer_id, name, {n_col}, {t_col}; one row per "
        "customer, no orders -> 0, 0; live view, not a snapshot.",
    )
    solution = f"""
sqlite3 {db} <<'SQL'
DELETE FROM orders WHERE amount < 0;
CREATE INDEX {index} ON orders(customer_id);
CREATE VIEW {view} AS
  SELECT c.id AS customer_id, c.name AS name, COUNT(o.id) AS {n_col},
         COALESCE(SUM(o.amount), 0) AS {t_col}
  FROM customers c LEFT JOIN orders o ON o.customer_id = c.id
  GROUP BY c.id;
SQL
"""
    check = f"""
import sqlite3
con = sqlite3.connect({db!r})
check(con.execute("SELECT COUNT(*) FROM orders WHERE amount < 0").fetchone()[0] == 0, "negative orders remain")
check(con.execute("SELECT COUNT(*) FROM orders").fetchone()[0] == {len(orders)}, "good orders were deleted")
idx = [r for r in con.execute("PRAGMA index_list(orders)") if r[1] == {index!r}]
check(idx, "there is no index {index} on orders")
cols = [r[2] for r in con.execute("PRAGMA index_info({index})")]
check(cols == ["customer_id"], "{index} covers %r, not customer_id" % cols)
kind = con.execute("SELECT type FROM sqlite_master WHERE name = {view!r}").fetchone()
check(kind == ("view",), "{view} is not a view")


def expected():
    out = {{}}
    for cid, name in con.execute("SELECT id, name FROM customers"):
        n, total = con.execute("SELECT COUNT(*), COALESCE(SUM(amount), 0) FROM orders WHERE customer_id = ?",
                               (cid,)).fetchone()
        out[cid] = (cid, name, n, total)
    return out


def got():
    rows = con.execute("SELECT customer_id, name, {n_col}, {t_col} FROM {view}").fetchall()
    return {{r[0]: tuple(r) for r in rows}}


check(got() == expected(), "{view} does not match the tables: %r" % got())
con.execute("INSERT INTO customers (id, name, country) VALUES (9001, 'Check', 'NZ')")
con.execute("INSERT INTO orders (customer_id, amount, created_at) VALUES (9001, 77, '2024-01-01')")
con.execute("INSERT INTO orders (customer_id, amount, created_at) VALUES ({customers[0][0]}, 5, '2024-01-02')")
check(got() == expected(), "{view} does not follow new rows")
con.rollback()
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["view", "index", "left-join", "data-cleaning"],
        setup_files={"schema.sql": sql},
        setup_script=f"mkdir -p $(dirname {db})\n{BUILD_DB.format(db=db)}",
        check_py=check,
        uses=("sqlite3",),
        metadata={
            "view": view,
            "index": index,
            "columns": [n_col, t_col],
            "phrasing": style,
            "phrasings": phrasings,
        },
        agent_timeout_sec=900.0,
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One SQL task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
