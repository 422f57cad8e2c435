"""A minimal agent CLI that speaks only the OpenAI chat API (CLI-native reference).

It is what any third-party agent CLI looks like from the ModelProxy's side:
a separate process that sends ``/v1/chat/completions`` requests with the
``bash`` and ``done`` tools, runs the returned calls with ``bash -c`` in its
working directory, and sends the results back as ``tool`` messages. It
imports no model code — only the tool definitions and the fenced-block
fallback parser.

    python -m termrl.agent.reference_cli --base-url http://127.0.0.1:8000/v1 \\
        --api-key episode-17 --workdir /app "Create hello.txt containing hi"

It prints one JSON line at the end: turns, stop reason, commands run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import click
import httpx

from termrl.llm.toolcalls import TOOLS, parse_response, system_prompt, truncate_middle
from termrl.presets import REFERENCE_CLI

__all__ = ["main", "run_agent"]


def _run_bash(command: str, workdir: str, timeout: float) -> str:
    try:
        done = subprocess.run(
            ["bash", "-c", command], cwd=workdir, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return f"[command timed out after {timeout:g} s]"
    output = truncate_middle(done.stdout + done.stderr, 4000)
    return f"{output}\n[exit code: {done.returncode}]"


def run_agent(
    base_url: str,
    api_key: str,
    model: str,
    instruction: str,
    workdir: str,
    max_turns: int = REFERENCE_CLI["max_turns"],
    max_tokens: int = REFERENCE_CLI["max_tokens"],
    temperature: float = REFERENCE_CLI["temperature"],
    seed: int | None = None,
) -> dict[str, Any]:
    """Run the loop until done or ``max_turns``; returns the summary printed by the CLI."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_prompt()},
        {"role": "user", "content": instruction},
    ]
    commands: list[str] = []
    stop = "max-turns"
    turns = 0
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=600
    ) as client:
        for turns in range(1, max_turns + 1):
            body: dict[str, Any] = {
                "model": model,
                "messages": messages,
                "tools": TOOLS,
                "max_tokens": max_tokens,
                "temperature": temperature,
                "logprobs": True,
            }
            if seed is not None:
                body["seed"] = seed + turns
            response = client.post("/chat/completions", json=body)
            response.raise_for_status()
            message = response.json()["choices"][0]["message"]
            messages.append(message)
            calls = message.get("tool_calls") or []
            if calls:
                finished = False
                for call in calls:
                    name = call["function"]["name"]
                    args = json.loads(call["function"]["arguments"] or "{}")
                    if name == "done":
                        result, finished = "ok", True
                    else:
                        commands.append(args["command"])
                        result = _run_bash(
                            args["command"], workdir, float(args.get("timeout") or 60)
                        )
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
                if finished:
                    stop = "done"
                    break
                continue
            # No structured call: accept a fenced bash block, as small models write them.
            parsed = parse_response(message.get("content") or "")
            if parsed.call_format == "fenced-bash":
                outputs = []
                for c in parsed.calls:
                    commands.append(c.arguments["command"])
                    outputs.append(_run_bash(c.arguments["command"], workdir, 60))
                messages.append({"role": "user", "content": "\n".join(outputs)})
            else:
                messages.append(
                    {"role": "user", "content": "No tool call found. Use the bash tool, or done."}
                )
    return {"turns": turns, "stop_reason": stop, "commands": commands}


@click.command()
@click.argument("instruction")
@click.option(
    "--base-url", required=True, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1"
)
@click.option(
    "--api-key", default="reference-cli", show_default=True, help="Also the proxy session key."
)
@click.option("--model", default="policy", show_default=True)
@click.option("--workdir", default=".", show_default=True, help="Where commands run.")
@click.option("--max-turns", default=REFERENCE_CLI["max_turns"], show_default=True)
@click.option("--max-tokens", default=REFERENCE_CLI["max_tokens"], show_default=True)
@click.option("--temperature", default=REFERENCE_CLI["temperature"], show_default=True)
@click.option("--seed", default=None, type=int)
def main(
    instruction: str,
    base_url: str,
    api_key: str,
    model: str,
    workdir: str,
    max_turns: int,
    max_tokens: int,
    temperature: float,
    seed: int | None,
) -> None:
    """Work on INSTRUCTION with the model behind BASE_URL."""
    summary = run_agent(
        base_url, api_key, model, instruction, workdir, max_turns, max_tokens, temperature, seed
    )
    json.dump(summary, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
