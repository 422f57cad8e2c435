"""Decoding stops once the turn's tool call is settled; a well-formed turn decodes as before.

The tiny model is first taught two answers (a few dozen optimizer steps on two sequences), so
that greedy decoding really writes them: ``done`` followed by filler, and a well-formed call.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from termrl.llm.continuous import ContinuousEngine
from termrl.llm.engine import SamplingParams
from termrl.llm.hf_engine import TransformersEngine
from termrl.llm.models import load_tokenizer
from termrl.llm.toolcalls import parse_response

DONE_THEN_FILLER = (
    '<tool_call>\n{"name": "done", "arguments": {}}\n'
    "I have finished the task and the file is written as asked, so there is nothing left."
)
WELL_FORMED = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la /app"}}\n</tool_call>'
PROMPTS = {DONE_THEN_FILLER: [200, 201, 202, 203], WELL_FORMED: [300, 301, 302, 303]}


def writes(model, prompt: list[int], answer: list[int]) -> bool:
    """True when greedy decoding after ``prompt`` gives ``answer`` (teacher-forced check)."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + answer])).logits[0, len(prompt) - 1 : -1]
    return logits.argmax(-1).tolist() == answer


@pytest.fixture(scope="module")
def taught_model(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model, fitted until greedy decoding writes each prompt's answer."""
    tokenizer = load_tokenizer(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    torch.manual_seed(0)
    rows = [(p, tokenizer.encode(a, add_special_tokens=False)) for a, p in PROMPTS.items()]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(150):  # ~60 steps here
        loss = sum(
            torch.nn.functional.cross_entropy(
                model(torch.tensor([prompt + answer])).logits[0, len(prompt) - 1 : -1],
                torch.tensor(answer),
            )
            for prompt, answer in rows
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 5 == 4 and all(writes(model, prompt, answer) for prompt, answer in rows):
            break
    out = tmp_path_factory.mktemp("taught")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.mark.parametrize("kind", [TransformersEngine, ContinuousEngine])
async def test_done_followed_by_filler_stops_after_the_call(taught_model, kind) -> None:
    engine = kind(taught_model)
    prompt = PROMPTS[DONE_THEN_FILLER]
    on = SamplingParams(max_new_tokens=80, temperature=0)
    [full] = await engine.generate(
        [prompt], SamplingParams(max_new_tokens=80, temperature=0, end_settled_calls=False)
    )
    [cut] = await engine.generate([prompt], on)
    assert full.text.startswith(DONE_THEN_FILLER)  # the model really writes the filler
    assert full.finish_reason == "length" and len(full.token_ids) == 80
    # Stopped at the first token after the object that is not the closing tag.
    assert cut.finish_reason == "stop"
    assert len(cut.token_ids) < 25 and cut.text.startswith(DONE_THEN_FILLER[:45])
    assert cut.token_ids == full.token_ids[: len(cut.token_ids)]
    # (The continuous engine's second call decodes on the first call's cached KV, which a
    # bfloat16 KV cache has rounded: ~2e-5 nats apart.)
    assert cut.logprobs == pytest.approx(full.logprobs[: len(cut.logprobs)], abs=1e-4)
    # The agent reads the cut turn as it read the whole one.
    assert parse_response(cut.text) == parse_response(full.text)
    await engine.aclose()


@pytest.mark.parametrize("kind", [TransformersEngine, ContinuousEngine])
async def test_a_well_formed_call_decodes_as_before(taught_model, kind) -> None:
    engine = kind(taught_model)
    prompt = PROMPTS[WELL_FORMED]
    [off] = await engine.generate(
        [prompt], SamplingParams(max_new_tokens=80, temperature=0, end_settled_calls=False)
    )
    [on] = await engine.generate([prompt], SamplingParams(max_new_tokens=80, temperature=0))
    assert on.text == off.text == WELL_FORMED and on.finish_reason == off.finish_reason == "stop"
    assert on.token_ids == off.token_ids
    assert on.logprobs == pytest.approx(off.logprobs, abs=1e-4)  # as above
    await engine.aclose()
