# codeact's prelude for the Python guests (MicroPython and CPython): the helpers
# every script sees, and the loop that reads scripts from stdin and answers on
# stdout (the protocol is in runtimes/wasm/src/protocol.rs). The host fills in
# __CODEACT_TOOLS__ (the tool names, a JSON array) and __CODEACT_MAX_DEPTH__ /
# __CODEACT_MAX_CALL_DEPTH__ (the nesting and call depth limits).
def __codeact_main():
    # Builds the helpers and returns the function that serves one script; the
    # loop runs at module level (see the end of this file).
    import sys
    import json

    try:
        import ast
    except ImportError:
        ast = None
    try:
        import traceback
    except ImportError:
        traceback = None
    try:
        import io
    except ImportError:
        io = None

    try:
        recursion_error = RecursionError
    except NameError:
        class recursion_error(Exception):
            pass

    TOOLS = __CODEACT_TOOLS__
    MAX_DEPTH = __CODEACT_MAX_DEPTH__
    MAX_CALL_DEPTH = __CODEACT_MAX_CALL_DEPTH__
    MEMORY_ANSWER = json.dumps({"fail": "memory", "message": "MemoryError: the script ran out of memory"})
    NO_RESULT = (
        "the script ended in a statement and called no result helper: end it with "
        "an expression such as final_result(value)"
    )
    stdin = getattr(sys.stdin, "buffer", sys.stdin)
    stdout = sys.stdout
    state = {"nonce": "", "last": None}

    if hasattr(sys, "setrecursionlimit"):
        # The script's own frames, plus the few the prelude adds below them.
        sys.setrecursionlimit(MAX_CALL_DEPTH + 8)

    # One buffer for every read: MicroPython never collects garbage here (see the
    # end of this file), so each step should leave as little behind as it can.
    buffer = bytearray(65536)
    view = memoryview(buffer)

    def read_line():
        # In large reads, not readline(): MicroPython's readline reads one byte per
        # system call. The host ends each line it sends with a newline and sends
        # one line at a time; past it, a read returns end-of-file.
        chunks = []
        while True:
            n = stdin.readinto(buffer)
            if not n:
                break
            chunks.append(bytes(view[:n]))
            if buffer[n - 1] == 10:
                break
        if len(chunks) == 1:
            return chunks[0].decode("utf-8")
        return b"".join(chunks).decode("utf-8")

    def flush():
        try:
            stdout.flush()
        except Exception:
            pass  # MicroPython's stdout raises EBADF on flush

    def send(text):
        # Piece by piece: after a MemoryError even one concatenation may fail.
        stdout.write("\x1ecodeact:")
        stdout.write(state["nonce"])
        stdout.write(" ")
        stdout.write(text)
        stdout.write("\n")
        flush()

    class ToolError(Exception):
        """A tool failed; the message says why."""

    class Unrepresentable(Exception):
        pass

    def remember(output):
        state["last"] = output
        return output

    def observation(value):
        return remember({"type": "observation", "value": value})

    def final_result(value, artifacts=None):
        if artifacts is None:
            return remember({"type": "final_result", "value": value})
        return remember({"type": "final_result", "value": value, "artifacts": artifacts})

    def error(message):
        return remember({"type": "error", "message": str(message)})

    def transfer_to_agent(agent_name):
        return remember({"type": "transfer_to_agent", "agent_name": str(agent_name)})

    def call_tool(name, args=None, **kwargs):
        name = str(name)
        if args is None:
            args = {}
        if kwargs:
            if not isinstance(args, dict):
                raise TypeError("call_tool takes a dict of arguments or keyword arguments, not both")
            args = dict(args)
            args.update(kwargs)
        send(json.dumps({"tool": name, "args": args}))
        line = read_line()
        if not line:
            raise ToolError("tool '%s' got no answer from the host" % name)
        answer = json.loads(line)
        if "error" in answer:
            raise ToolError(answer["error"])
        return answer.get("ok")

    def tool_function(name):
        def call(args=None, **kwargs):
            return call_tool(name, args, **kwargs)

        return call

    namespace = {}
    for tool in TOOLS:
        namespace[tool] = tool_function(tool)
    namespace.update({
        "__name__": "__main__",
        "observation": observation,
        "final_result": final_result,
        "error": error,
        "transfer_to_agent": transfer_to_agent,
        "call_tool": call_tool,
        "ToolError": ToolError,
    })

    def check(value, path, depth, ancestors):
        if depth > MAX_DEPTH:
            raise Unrepresentable(
                "%s is nested deeper than the nesting depth limit of %d" % (path, MAX_DEPTH)
            )
        if value is None or isinstance(value, (bool, int, str)):
            return
        if isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                raise Unrepresentable("%s is %r, which JSON cannot hold" % (path, value))
            return
        if isinstance(value, (list, tuple, dict)):
            if id(value) in ancestors:
                raise Unrepresentable(
                    "%s refers back to itself (a cycle), which JSON cannot hold" % path
                )
            ancestors.append(id(value))
            if isinstance(value, dict):
                for key in value:
                    if not isinstance(key, str):
                        raise Unrepresentable(
                            "%s has the key %r, but JSON keys are strings" % (path, key)
                        )
                    check(value[key], "%s[%r]" % (path, key), depth + 1, ancestors)
            else:
                for i, item in enumerate(value):
                    check(item, "%s[%d]" % (path, i), depth + 1, ancestors)
            ancestors.pop()
            return
        raise Unrepresentable(
            "%s is a %s, which JSON cannot hold" % (path, type(value).__name__)
        )

    def encode(value):
        check(value, "output", 0, [])
        return json.dumps(value)

    def split_micro(code):
        # No `ast` here: find the shortest tail starting on an unindented line that
        # compiles as an expression while the rest compiles as statements.
        lines = code.split("\n")
        end = len(lines)
        while end > 0 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
            end -= 1
        tries = 0
        i = end - 1
        while i >= 0 and tries < 24:
            line = lines[i]
            if line and not line[0].isspace() and line[0] != "#":
                tries += 1
                try:
                    tail = compile("\n".join(lines[i:end]), "<script>", "eval")
                    head = compile("\n".join(lines[:i]), "<script>", "exec")
                    return head, tail
                except SyntaxError:
                    pass
            i -= 1
        return compile(code, "<script>", "exec"), None

    def split(code):
        if ast is None:
            return split_micro(code)
        tree = ast.parse(code, "<script>", "exec")
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
            return compile(tree, "<script>", "exec"), compile(last, "<script>", "eval")
        return compile(tree, "<script>", "exec"), None

    def describe(e, syntax):
        if traceback is not None and sys.implementation.name == "cpython":
            if syntax:
                return "".join(traceback.format_exception_only(type(e), e)).rstrip()
            tb = e.__traceback__
            while tb is not None and tb.tb_frame.f_code.co_filename != "<script>":
                tb = tb.tb_next
            return "".join(traceback.format_exception(type(e), e, tb)).rstrip()
        if io is not None and hasattr(sys, "print_exception"):
            buffer = io.StringIO()
            sys.print_exception(e, buffer)
            # Drop the prelude's own frames (MicroPython calls the -c code <stdin>).
            lines = buffer.getvalue().rstrip().split("\n")
            return "\n".join([l for l in lines if not l.startswith('  File "<stdin>"')])
        return "%s: %s" % (type(e).__name__, e)

    def run(code):
        state["last"] = None
        try:
            head, tail = split(code)
        except SyntaxError as e:
            return json.dumps({"fail": "syntax", "message": describe(e, True)})
        try:
            exec(head, namespace)
            value = eval(tail, namespace) if tail is not None else None
            if value is None and state["last"] is not None:
                # A script that ends in a statement (an `if`, a loop) answers with
                # the last helper it called.
                value = state["last"]
            if value is None and tail is None:
                return json.dumps({"fail": "thrown", "message": NO_RESULT})
            return '{"done":' + encode(value) + "}"
        except Unrepresentable as e:
            return json.dumps({"fail": "unrepresentable", "message": str(e)})
        except MemoryError:
            # Prepared in advance: the heap is full, and describing the error
            # would need memory.
            return MEMORY_ANSWER
        except recursion_error as e:
            return json.dumps({"fail": "call_depth", "message": describe(e, False)})
        except SyntaxError as e:
            return json.dumps({"fail": "syntax", "message": describe(e, False)})
        except BaseException as e:
            if isinstance(e, RuntimeError) and "recursion" in str(e):
                return json.dumps({"fail": "call_depth", "message": describe(e, False)})
            return json.dumps({"fail": "thrown", "message": describe(e, False)})

    def serve_one():
        # Reads one script, runs it and answers; False at the end of input.
        line = read_line()
        if not line:
            return False
        try:
            request = json.loads(line)
        except ValueError:
            return True
        state["nonce"] = request["nonce"]
        try:
            answer = run(request["code"])
        except MemoryError:
            answer = MEMORY_ANSWER
        send(answer)
        return True

    return serve_one


__codeact_serve_one = __codeact_main()
del __codeact_main
if __import__("sys").implementation.name == "micropython":
    # This MicroPython build loses live objects when its collector runs (inside a
    # call it faults; even between scripts, at module level, a session's
    # variables went missing). So the collector never runs: a session holds at
    # most its heap (the memory limit) of allocations over its life, garbage
    # included; past that a script gets a MemoryError, reported as the memory
    # limit, and the session restarts.
    __import__("gc").disable()
while __codeact_serve_one():
    pass
