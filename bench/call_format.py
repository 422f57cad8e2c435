"""How often the policy answers in a usable call format, per system prompt style.

Samples one first-turn response per task instruction (procedural easy tasks)
under each prompt style of ``termrl.llm.toolcalls.PROMPTS``, parses it with
the agent's own parser and prints, per style, the share of each call format
(``tool-call``, ``fenced-bash``, ``malformed``, ``none``) and the failure rate
(no usable call), side by side in one run:

    python bench/call_format.py                     # default policy (SmolLM2-135M), 32 tasks
    python bench/call_format.py --tasks 64 --temperature 0
"""

from __future__ import annotations

import argparse
from collections import Counter

from components.synthesize.config import SynthesizeConfig
from components.synthesize.dedup import NearDuplicateFilter
from components.synthesize.generate import generate_tasks
from termrl.llm.engine import SamplingParams
from termrl.llm.hf_engine import TransformersEngine
from termrl.llm.models import resolve_model_path
from termrl.llm.toolcalls import PROMPTS, parse_response, system_prompt


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", default=None, help="policy folder (default: the embedded SmolLM2-135M)"
    )
    parser.add_argument("--tasks", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()

    tasks = generate_tasks(
        SynthesizeConfig(count=args.tasks, seed=7, difficulties=("easy",), progress=False),
        NearDuplicateFilter(),
    ).tasks
    engine = TransformersEngine(resolve_model_path(args.model))
    params = SamplingParams(
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=0
    )
    print(
        f"{len(tasks)} easy task instructions, T={args.temperature}, {args.max_new_tokens} tokens"
    )
    for style in PROMPTS:
        formats: Counter[str] = Counter()
        lengths = []
        for start in range(0, len(tasks), args.batch):
            batch = tasks[start : start + args.batch]
            prompts = [
                [
                    {"role": "system", "content": system_prompt(style)},
                    {"role": "user", "content": t.instruction},
                ]
                for t in batch
            ]
            for gen in engine.generate_sync(prompts, params):
                parsed = parse_response(gen.text)
                formats[parsed.call_format] += 1
                lengths.append(len(gen.token_ids))
        prompt_tokens = len(engine.tokenizer.encode(system_prompt(style)))
        failed = len(tasks) - formats["tool-call"] - formats["fenced-bash"]
        shares = ", ".join(
            f"{f} {formats[f]}" for f in ("tool-call", "fenced-bash", "malformed", "none")
        )
        print(
            f"{style:8s} system prompt {prompt_tokens:4d} tokens | {shares} | "
            f"no usable call {failed}/{len(tasks)} ({100 * failed / len(tasks):.0f} %) | "
            f"mean response {sum(lengths) / len(lengths):.0f} tokens"
        )


if __name__ == "__main__":
    main()
