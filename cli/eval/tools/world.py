"""The evaluation's command tools: one small, fixed world (weather, a shop, orders,
users, files). Called as `world.py TOOL` with the arguments as JSON on stdin; prints
one JSON value, or exits 1 with the reason on stderr (a tool error)."""
import json
import sys

WEATHER = {
    "paris": {"city": "Paris", "temp_c": 14.5, "condition": "cloudy"},
    "oslo": {"city": "Oslo", "temp_c": 3.0, "condition": "snow"},
    "madrid": {"city": "Madrid", "temp_c": 21.5, "condition": "sunny"},
    "berlin": {"city": "Berlin", "temp_c": 9.0, "condition": "rain"},
    "rome": {"city": "Rome", "temp_c": 18.0, "condition": "sunny"},
}
PRICES_EUR = {"apple": 0.45, "bread": 2.2, "cheese": 7.8, "milk": 1.15, "coffee": 6.4}
RATES_PER_EUR = {"EUR": 1.0, "USD": 1.1, "GBP": 0.85, "JPY": 160.0}
ORDERS = [
    {"id": 101, "customer": "mia", "amount": 23.5},
    {"id": 102, "customer": "noah", "amount": 12.0},
    {"id": 103, "customer": "mia", "amount": 8.25},
    {"id": 104, "customer": "lena", "amount": 41.0},
    {"id": 105, "customer": "noah", "amount": 30.75},
    {"id": 106, "customer": "lena", "amount": 5.5},
    {"id": 107, "customer": "mia", "amount": 19.0},
]
USERS = [
    {"user_id": 7, "name": "Mia Chen", "email": "mia.chen@example.org", "country": "DE"},
    {"user_id": 12, "name": "Noah Berg", "email": "noah@example.net", "country": "NO"},
    {"user_id": 42, "name": "Lena Ortiz", "email": "lena.ortiz@example.com", "country": "ES"},
    {"user_id": 51, "name": "Omar Haddad", "email": "omar.h@example.com", "country": "DE"},
    {"user_id": 63, "name": "Ines Dupont", "email": "ines@example.fr", "country": "FR"},
]
FILES = {
    "sales.csv": "product,quantity,unit_price\nlamp,3,19.5\ndesk,1,120.0\nchair,4,45.0\nlamp,2,19.5\npen,25,1.2\n",
    "server.log": "\n".join([
        "2026-11-30 10:00:01 INFO start",
        "2026-11-30 10:00:05 ERROR E42 disk full",
        "2026-11-30 10:01:10 WARN slow request",
        "2026-11-30 10:02:00 ERROR E17 timeout",
        "2026-11-30 10:03:30 INFO request ok",
        "2026-11-30 10:04:12 ERROR E42 disk full",
        "2026-11-30 10:05:00 ERROR E42 disk full",
        "2026-11-30 10:06:45 INFO stop",
    ]) + "\n",
    "inventory.json": json.dumps([
        {"sku": "A1", "name": "lamp", "stock": 12},
        {"sku": "B2", "name": "desk", "stock": 0},
        {"sku": "C3", "name": "chair", "stock": 7},
        {"sku": "D4", "name": "pen", "stock": 0},
    ]),
}


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


def get_weather(args):
    city = str(args.get("city", ""))
    found = WEATHER.get(city.strip().lower())
    if found is None:
        fail(f"no weather data for '{city}'; known cities: Paris, Oslo, Madrid, Berlin, Rome")
    return found


def get_price(args):
    item = str(args.get("item", ""))
    price = PRICES_EUR.get(item.strip().lower())
    if price is None:
        fail(f"unknown item '{item}'; items: apple, bread, cheese, milk, coffee")
    return price


def convert_currency(args):
    amount, source, target = args.get("amount"), args.get("from_currency"), args.get("to_currency")
    if not isinstance(amount, (int, float)) or isinstance(amount, bool):
        fail("amount must be a number")
    for code in (source, target):
        if code not in RATES_PER_EUR:
            fail(f"unknown currency {code!r}; use a three-letter code: EUR, USD, GBP, JPY")
    return round(amount / RATES_PER_EUR[source] * RATES_PER_EUR[target], 4)


def list_orders(args):
    customer = args.get("customer")
    return [o for o in ORDERS if customer in (None, o["customer"])]


def find_user(args):
    name = str(args.get("name", "")).strip().lower()
    if not name:
        fail("name is required")
    return [u["user_id"] for u in USERS if name in u["name"].lower()]


def get_user(args):
    user_id = args.get("user_id")
    if not isinstance(user_id, int) or isinstance(user_id, bool):
        fail(f"user_id must be an integer id such as 7, not {json.dumps(user_id)}; find_user(name) gives the ids of users by name")
    for user in USERS:
        if user["user_id"] == user_id:
            return user
    fail(f"no user with id {user_id}")


def read_file(args):
    name = str(args.get("name", ""))
    if name not in FILES:
        fail(f"no file '{name}'; files: {', '.join(sorted(FILES))}")
    return FILES[name]


TOOLS = {f.__name__: f for f in [get_weather, get_price, convert_currency, list_orders, find_user, get_user, read_file]}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in TOOLS:
        fail(f"usage: world.py TOOL (one of {', '.join(TOOLS)})")
    arguments = json.load(sys.stdin)
    if not isinstance(arguments, dict):
        fail("the arguments must be a JSON object")
    print(json.dumps(TOOLS[sys.argv[1]](arguments)))
