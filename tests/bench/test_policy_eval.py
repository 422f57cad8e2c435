"""The benches' shared eval step (``bench/policy_eval.py``): it resumes, and a failed eval ends the bench."""

from __future__ import annotations

import argparse

import pytest

from bench.policy_eval import add_policy_options, evaluate, policies
from bench.reach import reach_tasks
from termrl.artifacts import save_tasks

SETTINGS = argparse.Namespace(max_turns=3, max_new_tokens=128, concurrency=16)


def test_a_label_with_results_is_not_evaluated_again(tmp_path):
    done = tmp_path / "final.parquet"
    done.write_bytes(b"results of an earlier run")
    # The model does not exist: had the eval run, it would have failed.
    assert (
        evaluate("final", str(tmp_path / "none"), tmp_path / "t.parquet", tmp_path, SETTINGS)
        == done
    )


def test_a_failed_eval_ends_the_bench_naming_the_policy(tmp_path, capfd):
    save_tasks(tmp_path / "t.parquet", reach_tasks()[:1])
    missing = tmp_path / "no-such-model"
    with pytest.raises(SystemExit, match=r"the eval of final \(.*no-such-model\) failed"):
        evaluate("final", str(missing), tmp_path / "t.parquet", tmp_path, SETTINGS)
    assert "not a folder" in capfd.readouterr().err
    assert not (tmp_path / "final.parquet").exists()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_policy_options(parser)
    return parser


def test_policies_keep_the_order_of_model_options():
    parser = _parser()
    args = parser.parse_args(["--model", "b=/m/b", "--model", "a=/m/a=x", "--out", "o"])
    assert list(policies(parser, args).items()) == [("b", "/m/b"), ("a", "/m/a=x")]
    assert (args.max_turns, args.max_new_tokens, args.concurrency) == (3, 128, 16)


@pytest.mark.parametrize("specs", [["a=/m", "a=/n"], ["a="], ["just-a-path"]])
def test_a_bad_model_option_is_a_usage_error(specs, capsys):
    parser = _parser()
    args = parser.parse_args([x for s in specs for x in ("--model", s)] + ["--out", "o"])
    with pytest.raises(SystemExit) as exit_:
        policies(parser, args)
    assert exit_.value.code == 2
    assert "--model takes LABEL=PATH, each label once" in capsys.readouterr().err
