"""Appending turns as tokens reproduces the chat template's own rendering."""

from __future__ import annotations

from termrl.llm.chat import ChatTokens


def test_continuation_after_a_stop_string_closes_the_turn(tiny_tokenizer) -> None:
    chat = ChatTokens(tiny_tokenizer)
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    ids = chat.initial_ids(messages)
    response = tiny_tokenizer.encode(
        '<tool_call>\n{"name": "done"}\n</tool_call>', add_special_tokens=False
    )
    new = [{"role": "user", "content": "<tool_response>\nok\n</tool_response>"}]
    stream = ids + response + chat.continuation_ids(new, response)
    expected = tiny_tokenizer.apply_chat_template(
        [*messages, {"role": "assistant", "content": tiny_tokenizer.decode(response)}, *new],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert tiny_tokenizer.decode(stream) == expected


def test_an_emitted_end_of_turn_token_is_not_repeated(tiny_tokenizer) -> None:
    chat = ChatTokens(tiny_tokenizer)
    response = tiny_tokenizer.encode("hello", add_special_tokens=False) + [
        tiny_tokenizer.eos_token_id
    ]
    cont = chat.continuation_ids([{"role": "user", "content": "next"}], response)
    assert cont[0] != tiny_tokenizer.eos_token_id
    assert (
        tiny_tokenizer.decode(response + cont)
        == "hello<|im_end|>\n<|im_start|>user\nnext<|im_end|>\n<|im_start|>assistant\n"
    )
