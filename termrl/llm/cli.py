"""``termrl model ...``: prepare the default policy, build the tiny model, serve a ModelProxy."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from termrl.llm.models import DEFAULT_MODEL, build_tiny_model, prepare_default_model

__all__ = ["model"]


@click.group()
def model() -> None:
    """Models: the embedded default policy, the tiny test model, the OpenAI-compatible proxy."""


@model.command()
@click.option("--force", is_flag=True, help="Convert again even if the folder exists.")
def prepare(force: bool) -> None:
    """Convert the embedded SmolLM2-135M-Instruct GGUF into a safetensors folder (once)."""
    path = prepare_default_model(force=force)
    click.echo(f"{DEFAULT_MODEL}: {path}")


@model.command()
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--seed", default=0, show_default=True, help="Initialisation seed.")
def tiny(out_dir: Path, seed: int) -> None:
    """Write the ~3 M parameter random Llama with the SmolLM2 tokenizer (tests, smoke runs)."""
    click.echo(str(build_tiny_model(out_dir, seed=seed)))


@model.command()
@click.option(
    "--model", "model_path", default=None, help="Model folder (default: the default policy)."
)
@click.option(
    "--engine",
    "kind",
    type=click.Choice(["transformers", "vllm"]),
    default="transformers",
    show_default=True,
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True)
@click.option("--max-batch-size", default=32, show_default=True)
def serve(model_path: str | None, kind: str, host: str, port: int, max_batch_size: int) -> None:
    """Serve the model as an OpenAI-compatible ModelProxy (CLI-native mode)."""
    from termrl.llm.engines import make_engine
    from termrl.llm.proxy import ModelProxy

    async def run() -> None:
        proxy = ModelProxy(
            make_engine(kind, model_path), host=host, port=port, max_batch_size=max_batch_size
        )
        async with proxy:
            click.echo(f"serving {proxy.engine.model_name} at {proxy.base_url}", err=True)
            await asyncio.Event().wait()

    asyncio.run(run())
