"""An MCP server over stdio (newline-delimited JSON-RPC, protocol 2025-06-18) whose
tools misbehave on purpose, for the tests of codeact's MCP client: a crash, a hang,
garbage on stdout, an error result, a 10 MB result, a result against its own output
schema. Hand-written (standard library only) so that each failure is exact. Its
well-behaved `add` and `price` serve the benchmark and the real-model tasks.

Usage: scripted_server.py [--many N] [--odd-names] [--marker TEXT]
  --many N     also list N tools t0 … t(N-1), each returning its own index
  --odd-names  also list tools named "café", "caf_" (the same once made an
               identifier) and "" (none at all)
  --marker T   ignored; lets a test find this process by its command line
"""

import json
import sys
import time

CALLS = 0


def tool(name, description, properties=None, required=None, output=None):
    spec = {
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": properties or {}, "required": required or []},
    }
    if output is not None:
        spec["outputSchema"] = output
    return spec


SUM_SCHEMA = {"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]}

TOOLS = [
    tool("add", "Adds a and b.", {"a": {"type": "integer"}, "b": {"type": "integer"}}, ["a", "b"], SUM_SCHEMA),
    tool("fail", "Always fails."),
    tool("crash", "Exits the server without answering."),
    tool("hang", "Never answers."),
    tool("garbage", "Writes a line that is not JSON, then answers."),
    tool("big", "Answers with 10 MB of text."),
    tool("wrong", "Answers against its own output schema.", output=SUM_SCHEMA),
    tool("calls", "How many calls this server process has served, this one included."),
    tool("price", "The price of one unit of a shop item (apple, bread or milk), in euros.",
         {"item": {"type": "string"}}, ["item"],
         {"type": "object", "properties": {"euros": {"type": "number"}}, "required": ["euros"]}),
]

PRICES = {"apple": 0.5, "bread": 2.25, "milk": 1.25}


def reply(request_id, result=None, error=None):
    message = {"jsonrpc": "2.0", "id": request_id}
    if error is not None:
        message["error"] = error
    else:
        message["result"] = result
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def text(value, is_error=False):
    return {"content": [{"type": "text", "text": value}], "isError": is_error}


def call(name, arguments):
    global CALLS
    CALLS += 1
    if name == "add":
        total = arguments["a"] + arguments["b"]
        return {"content": [{"type": "text", "text": json.dumps({"sum": total})}], "structuredContent": {"sum": total}}
    if name == "fail":
        return text("no such repository: octo/none", is_error=True)
    if name == "crash":
        sys.exit(3)
    if name == "hang":
        while True:
            time.sleep(60)
    if name == "garbage":
        sys.stdout.write("this is not JSON-RPC\n")
        sys.stdout.flush()
        return text("answered after garbage")
    if name == "big":
        return text("x" * 10_000_000)
    if name == "wrong":
        return {"content": [], "structuredContent": {"sum": "seven"}}
    if name == "calls":
        return {"content": [], "structuredContent": {"calls": CALLS}}
    if name == "price":
        item = str(arguments["item"]).strip().lower().rstrip("s")
        if item not in PRICES:
            return text(f"no item '{arguments['item']}'; items: apple, bread, milk", is_error=True)
        return {"content": [{"type": "text", "text": json.dumps({"euros": PRICES[item]})}],
                "structuredContent": {"euros": PRICES[item]}}
    if name.startswith("t") and name[1:].isdigit():
        return text(name[1:])
    return None


def main():
    args = sys.argv[1:]
    if "--many" in args:
        count = int(args[args.index("--many") + 1])
        TOOLS.extend(tool(f"t{i}", f"Returns {i}.") for i in range(count))
    if "--odd-names" in args:
        TOOLS.extend(tool(name, "An oddly named tool.") for name in ["café", "caf_", ""])
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            continue  # a notification
        if method == "initialize":
            reply(request_id, {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "scripted", "version": "1"},
            })
        elif method == "tools/list":
            reply(request_id, {"tools": TOOLS})
        elif method == "tools/call":
            params = message["params"]
            result = call(params["name"], params.get("arguments") or {})
            if result is None:
                reply(request_id, error={"code": -32602, "message": f"unknown tool {params['name']}"})
            else:
                reply(request_id, result)
        elif method == "ping":
            reply(request_id, {})
        else:
            reply(request_id, error={"code": -32601, "message": f"no method {method}"})


if __name__ == "__main__":
    main()
