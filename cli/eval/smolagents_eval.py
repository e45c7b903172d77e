"""The baseline for `codeact eval`: smolagents' CodeAgent on the same task file, the
same command tools and the same model, writing run records that `codeact eval report`
judges with the same rules.

Run from the repository root with the peers' environment (../shared/peers/setup.sh),
which has smolagents; its OpenAI client needs `pip install openai`:

    ~/.cache/peers-bench/.venv/bin/pip install openai
    ~/.cache/peers-bench/.venv/bin/python cli/eval/smolagents_eval.py \
        --base-url http://127.0.0.1:18080/v1 --label baseline --runs 2

The agent gets the settings `codeact eval run` uses: 8 steps, temperature 0, 1,024
output tokens per reply; everything else is smolagents' default (its own prompt,
its local Python executor)."""
import argparse
import datetime
import json
import os
import subprocess
import sys
import time

from smolagents import CodeAgent, OpenAIServerModel, Tool


def command_tool(spec):
    """A smolagents tool that runs the manifest's command exactly as codeact does:
    the arguments as JSON on stdin, one JSON value on stdout, stderr on failure."""
    properties = spec.get("parameters", {}).get("properties", {})
    required = set(spec.get("parameters", {}).get("required", []))
    kinds = {"string": "string", "number": "number", "integer": "integer", "boolean": "boolean",
             "array": "array", "object": "object"}

    class CommandTool(Tool):
        name = spec["name"]
        description = spec["description"]
        inputs = {
            key: {"type": kinds.get(value.get("type"), "any"), "description": key,
                  **({} if key in required else {"nullable": True})}
            for key, value in properties.items()
        }
        output_type = "any"
        skip_forward_signature_validation = True

        def forward(self, *args, **kwargs):
            if args and isinstance(args[0], dict) and not kwargs:
                kwargs = args[0]
            done = subprocess.run(spec["command"], input=json.dumps(kwargs), capture_output=True,
                                  text=True, timeout=30)
            if done.returncode != 0:
                raise RuntimeError(done.stderr.strip() or f"{self.name} failed")
            return json.loads(done.stdout)

    return CommandTool()


def jsonable(value):
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return str(value)


def next_run(out, label, runtime):
    prefix = f"{label}__smolagents__{runtime}__run"
    runs = [int(name[len(prefix):-5]) for name in os.listdir(out)
            if name.startswith(prefix) and name.endswith(".json")]
    return max(runs, default=0) + 1


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", default="cli/eval/tasks.jsonl")
    parser.add_argument("--tools", default="cli/eval/tools.json")
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", default="local")
    parser.add_argument("--label", default="baseline")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--out", default="cli/eval/results")
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    tasks = [json.loads(line) for line in open(args.tasks) if line.strip()]
    if args.only:
        tasks = [t for t in tasks if t["id"] in args.only.split(",")]
    specs = {spec["name"]: spec for spec in json.load(open(args.tools))}
    os.makedirs(args.out, exist_ok=True)
    for _ in range(args.runs):
        run = next_run(args.out, args.label, "python")
        record = {"label": args.label, "runner": "smolagents", "runtime": "python",
                  "model": f"openai:{args.model}", "run": run,
                  "started": datetime.datetime.now(datetime.timezone.utc).isoformat(), "tasks": []}
        path = os.path.join(args.out, f"{args.label}__smolagents__python__run{run}.json")
        for task in tasks:
            model = OpenAIServerModel(model_id=args.model, api_base=args.base_url, api_key="none",
                                      temperature=0.0, max_tokens=1024)
            agent = CodeAgent(tools=[command_tool(specs[name]) for name in task["tools"]],
                              model=model, max_steps=8, verbosity_level=0)
            started = time.monotonic()
            answer, outcome, error = None, "final_result", None
            try:
                result = agent.run(task["task"], return_full_result=True)
                if result.state == "success":
                    answer = jsonable(result.output)
                else:
                    outcome = "step_limit"
                usage = result.token_usage
            except Exception as e:  # a host failure is recorded, not fatal
                outcome, error, usage = "host_error", str(e), None
            steps = sum(1 for step in agent.memory.steps if type(step).__name__ == "ActionStep")
            record["tasks"].append({
                "id": task["id"], "outcome": outcome, "answer": answer, "steps": steps,
                "input_tokens": usage.input_tokens if usage else 0,
                "output_tokens": usage.output_tokens if usage else 0,
                "wall_ms": int((time.monotonic() - started) * 1000),
                **({"error": error} if error else {}),
            })
            print(f"{args.label} smolagents run {run} {task['id']}: {outcome} {json.dumps(answer)} "
                  f"in {steps} step(s), {time.monotonic() - started:.1f} s", file=sys.stderr)
            with open(path, "w") as f:
                json.dump(record, f, indent=2)


if __name__ == "__main__":
    main()
