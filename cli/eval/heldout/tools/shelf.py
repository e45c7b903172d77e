"""The held-out evaluation's command tools: a second small, fixed world (a library's
catalogue, flights, a unit converter, staff, a warehouse, documents), unlike the
development set's. Called as `shelf.py TOOL` with the arguments as JSON on stdin;
prints one JSON value, or exits 1 with the reason on stderr (a tool error)."""
import json
import sys

BOOKS = [
    {"isbn": "978-0-11", "title": "The Salt Road", "author": "Ada Brenner", "year": 1998},
    {"isbn": "978-0-12", "title": "Winter Orchard", "author": "Tomas Leif", "year": 2004},
    {"isbn": "978-0-13", "title": "A Garden of Clocks", "author": "Mira Sol", "year": 1987},
    {"isbn": "978-0-14", "title": "The Glass Garden", "author": "Hugo Varga", "year": 1979},
    {"isbn": "978-0-15", "title": "Garden Paths", "author": "Elin Moss", "year": 2011},
    {"isbn": "978-0-16", "title": "Northern Lights Again", "author": "Ada Brenner", "year": 2015},
]
LOANS = {"978-0-11": 57, "978-0-12": 19, "978-0-13": 8, "978-0-14": 33, "978-0-15": 12, "978-0-16": 41}
FLIGHTS = {
    "LH400": {"code": "LH400", "origin": "FRA", "destination": "JFK", "status": "delayed", "delay_min": 45},
    "AF1234": {"code": "AF1234", "origin": "CDG", "destination": "FCO", "status": "delayed", "delay_min": 70},
    "BA117": {"code": "BA117", "origin": "LHR", "destination": "JFK", "status": "on time", "delay_min": 0},
    "KL1001": {"code": "KL1001", "origin": "AMS", "destination": "LHR", "status": "cancelled", "delay_min": 0},
}
UNITS = {"km": ("length", 1000.0), "m": ("length", 1.0), "mi": ("length", 1609.344), "ft": ("length", 0.3048),
         "kg": ("mass", 1.0), "lb": ("mass", 0.45359237), "g": ("mass", 0.001)}
STAFF = [
    {"name": "Ravi Nair", "department": "engineering", "salary": 72000, "start_year": 2019},
    {"name": "Julia Weiss", "department": "sales", "salary": 54000, "start_year": 2021},
    {"name": "Kenji Ito", "department": "engineering", "salary": 81000, "start_year": 2016},
    {"name": "Sara Lind", "department": "support", "salary": 43000, "start_year": 2022},
    {"name": "Paul Okafor", "department": "engineering", "salary": 65500, "start_year": 2023},
    {"name": "Nora Blum", "department": "sales", "salary": 58500, "start_year": 2018},
]
STOCK = {"A-100": 14, "B-220": 3, "C-310": 27, "D-405": 0}
DOCUMENTS = {
    "inventory.csv": "product,quantity,unit_price\nhammer,12,9.5\nwrench,4,14.0\nsaw,7,22.0\ndrill,2,89.0\ntape,30,1.5\n",
    "visits.log": "\n".join([
        "09:01 visitor=anna page=/home",
        "09:03 visitor=ben page=/shop",
        "09:04 visitor=anna page=/shop",
        "09:10 visitor=carl page=/home",
        "09:12 visitor=ben page=/cart",
        "09:20 visitor=dana page=/home",
        "09:31 visitor=anna page=/cart",
    ]) + "\n",
    "recipe.txt": "Pancakes (serves 4)\n- 200 g flour\n- 300 ml milk\n- 2 eggs\n- 1 pinch salt\n",
}


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


def search_books(args):
    query = str(args.get("query", "")).strip().lower()
    if not query:
        fail("query is required: a word of the title or the author")
    return [b for b in BOOKS if query in b["title"].lower() or query in b["author"].lower()]


def book_loans(args):
    isbn = str(args.get("isbn", ""))
    if isbn not in LOANS:
        fail(f"no book with isbn '{isbn}'; search_books(query) gives the isbn of a book")
    return LOANS[isbn]


def flight_status(args):
    code = str(args.get("code", ""))
    if " " in code:
        fail(f"flight codes have no spaces: write '{code.replace(' ', '')}', not '{code}'")
    found = FLIGHTS.get(code.upper())
    if found is None:
        fail(f"no flight '{code}' today")
    return found


def convert_units(args):
    value, source, target = args.get("value"), args.get("from"), args.get("to")
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        fail("value must be a number")
    for unit in (source, target):
        if unit not in UNITS:
            fail(f"unknown unit {unit!r}; units: {', '.join(UNITS)}")
    if UNITS[source][0] != UNITS[target][0]:
        fail(f"cannot convert {UNITS[source][0]} ({source}) to {UNITS[target][0]} ({target})")
    return round(value * UNITS[source][1] / UNITS[target][1], 6)


def staff(args):
    department = args.get("department")
    return [s for s in STAFF if department in (None, s["department"])]


def stock_level(args):
    sku = str(args.get("sku", ""))
    if sku not in STOCK:
        fail(f"unknown sku '{sku}'; SKUs are a capital letter, a dash and three digits, such as A-100")
    return STOCK[sku]


def read_document(args):
    name = str(args.get("name", ""))
    if name not in DOCUMENTS:
        fail(f"no document '{name}'; documents: {', '.join(sorted(DOCUMENTS))}")
    return DOCUMENTS[name]


TOOLS = {f.__name__: f for f in [search_books, book_loans, flight_status, convert_units, staff, stock_level, read_document]}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in TOOLS:
        fail(f"usage: shelf.py TOOL (one of {', '.join(TOOLS)})")
    arguments = json.load(sys.stdin)
    if not isinstance(arguments, dict):
        fail("the arguments must be a JSON object")
    print(json.dumps(TOOLS[sys.argv[1]](arguments)))
