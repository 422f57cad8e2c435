"""The static-KV decode step reproduces the transformers model's logits, row by row."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache

from termrl.llm import decode_kernels
from termrl.llm.decode_step import SlotDecoder, _row_lengths, resolve_weights_dtype

HAS_COMPILER = decode_kernels.find_compiler() is not None


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def prefill(model, prompt: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """KV of ``prompt`` computed by the transformers model, per layer [1, H_kv, L, D]."""
    cache = DynamicCache()
    with torch.inference_mode():
        model(torch.tensor([prompt]), past_key_values=cache, use_cache=True)
    return [(layer.keys, layer.values) for layer in cache.layers]


def reference_logprobs(model, sequence: list[int]) -> torch.Tensor:
    """log softmax of the next token after ``sequence``, from a full forward pass."""
    with torch.inference_mode():
        return torch.log_softmax(model(torch.tensor([sequence])).logits[0, -1], -1)


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "sdpa"])
def test_rows_of_different_lengths_step_like_full_forwards(model, kernel) -> None:
    # Lengths straddle the 256-column growth step, so SDPA's cache also grows mid-run.
    prompts = [list(range(100, 100 + n)) for n in (5, 250, 40)]
    decoder = SlotDecoder(
        model, max_rows=4, max_length=1024, weights_dtype="float32", attention_kernel=kernel
    )
    for slot, prompt in enumerate(prompts):
        decoder.load_row(slot, prefill(model, prompt[:-1]))
    fed = torch.tensor([p[-1] for p in prompts])
    positions = torch.tensor([len(p) - 1 for p in prompts])
    with torch.inference_mode():
        for _ in range(12):
            logits = decoder.step(fed, positions)  # [3, V]
            for row, prompt in enumerate(prompts):
                got = torch.log_softmax(logits[row], -1)
                assert torch.allclose(got, reference_logprobs(model, prompt), atol=1e-4)
            fed = logits.argmax(-1)
            for row, prompt in enumerate(prompts):
                prompt.append(int(fed[row]))
            positions = positions + 1
    if decoder.attend is None:
        assert decoder.length_capacity == 512  # 250 + 12 columns: two growth steps
    else:  # the kernel's cache is whole from the start: it never grows
        assert (decoder.rows_capacity, decoder.length_capacity) == (4, 1024)


@pytest.mark.skipif(not HAS_COMPILER, reason="no C compiler")
@pytest.mark.parametrize("fused_ops", [True, False], ids=["c-ops", "torch-ops"])
def test_the_kernel_never_reads_a_column_past_a_row_s_length(model, fused_ops) -> None:
    # The kernel's cache is allocated unwritten: what lies past a row's length is whatever the
    # memory held. NaN there would reach the logits if any of it were read.
    prompts = [list(range(400, 400 + n)) for n in (280, 290, 285)]
    decoder = SlotDecoder(
        model, max_rows=4, max_length=512, weights_dtype="float32", fused_ops=fused_ops
    )
    decoder.reserve(1, 1)
    for cache in decoder.keys + decoder.values:
        cache.fill_(float("nan"))
    for slot, prompt in enumerate(prompts):
        decoder.load_row(slot, prefill(model, prompt[:-1]))
    with torch.inference_mode():
        logits = decoder.step(
            torch.tensor([p[-1] for p in prompts]), torch.tensor([len(p) - 1 for p in prompts])
        )
    # The NaN is still there, in the columns one SDPA call over the batch would read for row 0.
    assert decoder.keys[0][0, :, len(prompts[0]) : len(prompts[1])].isnan().all()
    for row, prompt in enumerate(prompts):
        got = torch.log_softmax(logits[row], -1)
        assert torch.allclose(got, reference_logprobs(model, prompt), atol=1e-4)
    kept = decoder.row_kv(1, len(prompts[1]) - 1)
    expected = prefill(model, prompts[1][:-1])
    for (k, v), (k_ref, v_ref) in zip(kept, expected, strict=True):
        assert torch.allclose(k, k_ref, atol=1e-4) and torch.allclose(v, v_ref, atol=1e-4)


def test_a_moved_row_steps_on_from_its_new_slot(model) -> None:
    prompts = [list(range(300, 300 + n)) for n in (20, 30)]
    decoder = SlotDecoder(model, max_rows=2, max_length=512, weights_dtype="float32")
    for slot, prompt in enumerate(prompts):
        decoder.load_row(slot, prefill(model, prompt[:-1]))
    # Row 0 leaves; row 1 moves into slot 0 and steps alone.
    decoder.move_row(1, 0, len(prompts[1]) - 1)
    with torch.inference_mode():
        logits = decoder.step(torch.tensor([prompts[1][-1]]), torch.tensor([len(prompts[1]) - 1]))
    got = torch.log_softmax(logits[0], -1)
    assert torch.allclose(got, reference_logprobs(model, prompts[1]), atol=1e-4)


@pytest.mark.parametrize("weights_dtype", ["float32", "bfloat16"])
def test_packed_weights_step_like_the_plain_matmuls(model, weights_dtype) -> None:
    prompts = [list(range(700, 700 + n)) for n in (9, 60, 33)]
    decoders = {
        pack: SlotDecoder(
            model, max_rows=4, max_length=256, weights_dtype=weights_dtype, pack_weights=pack
        )
        for pack in (True, False)
    }
    # torch's CPU wheels carry oneDNN; packing is what the engine runs here.
    assert decoders[True].packed == torch.backends.mkldnn.is_available()
    assert not decoders[False].packed
    logits = {}
    for pack, decoder in decoders.items():
        for slot, prompt in enumerate(prompts):
            decoder.load_row(slot, prefill(model, prompt[:-1]))
        with torch.inference_mode():
            logits[pack] = decoder.step(
                torch.tensor([p[-1] for p in prompts]), torch.tensor([len(p) - 1 for p in prompts])
            )
    # oneDNN and torch's matmul sum in other orders: float32 rounding apart, no more. In bf16
    # both round the activations the same way before the matmul.
    tolerance = 1e-5 if weights_dtype == "float32" else 1e-2
    assert torch.allclose(logits[True], logits[False], atol=tolerance)


def test_every_way_of_attending_gives_the_same_logits(model) -> None:
    # One long row among short ones: one SDPA call would compute every row over 600 columns.
    prompts = [list(range(200, 200 + n)) for n in (6, 601, 9, 11)]
    assert _row_lengths([len(p) for p in prompts]) == [len(p) for p in prompts]
    assert _row_lengths([1000] * 8) is None  # equal lengths: one call reads nothing extra
    assert _row_lengths([900, 1000, 950]) is None  # close lengths: a call a row costs more
    ways = {
        "kernels": {},  # the default where a C compiler builds them: the whole step in one call
        "kernels, op by op": {"one_call": False},
        "kernel, torch ops": {"fused_ops": False},
        "one SDPA call": {"attention_kernel": False, "row_attention": False},
        "SDPA row by row": {"attention_kernel": False},
    }
    logits = {}
    for way, options in ways.items():
        decoder = SlotDecoder(
            model, max_rows=4, max_length=1024, weights_dtype="float32", **options
        )
        assert (decoder.attend is not None) == (way.startswith("kernel") and HAS_COMPILER)
        assert (decoder.ops is not None) == (way.startswith("kernels") and HAS_COMPILER)
        assert decoder.one_call == (way == "kernels" and HAS_COMPILER)
        for slot, prompt in enumerate(prompts):
            decoder.load_row(slot, prefill(model, prompt[:-1]))
        with torch.inference_mode():
            logits[way] = decoder.step(
                torch.tensor([p[-1] for p in prompts]), torch.tensor([len(p) - 1 for p in prompts])
            )
    for way in ways:
        assert torch.allclose(logits[way], logits["one SDPA call"], atol=1e-5), way
        for row, prompt in enumerate(prompts):
            got = torch.log_softmax(logits[way][row], -1)
            assert torch.allclose(got, reference_logprobs(model, prompt), atol=1e-4), way


@pytest.mark.skipif(not HAS_COMPILER, reason="no C compiler")
def test_the_c_ops_step_like_the_torch_ops_in_bfloat16(model) -> None:
    prompts = [list(range(900, 900 + n)) for n in (7, 300, 31)]
    logits = {}
    for fused in (True, False):
        decoder = SlotDecoder(
            model, max_rows=4, max_length=512, weights_dtype="bfloat16", fused_ops=fused
        )
        assert (decoder.ops is not None) == fused
        for slot, prompt in enumerate(prompts):
            decoder.load_row(slot, prefill(model, prompt[:-1]))
        fed = torch.tensor([p[-1] for p in prompts])
        positions = torch.tensor([len(p) - 1 for p in prompts])
        steps = []
        with torch.inference_mode():
            for _ in range(4):  # a few steps: what the C ops write to the cache is read back
                steps.append(torch.log_softmax(decoder.step(fed, positions), -1))
                fed, positions = (fed * 7 + 3) % 1000, positions + 1
        logits[fused] = torch.stack(steps)
    # Both round each matmul's input to bfloat16; float32 rounding apart before that can
    # flip a bfloat16 rounding, so the two are close, not equal.
    assert (logits[True] - logits[False]).abs().max() < 0.05


@pytest.mark.skipif(not HAS_COMPILER, reason="no C compiler")
@pytest.mark.parametrize("weights_dtype", ["float32", "bfloat16"])
def test_one_call_a_step_gives_the_op_by_op_logits_as_rows_come_and_go(model, weights_dtype):
    prompts = [list(range(600, 600 + n)) for n in (12, 90, 41)]
    decoders = {
        one: SlotDecoder(
            model, max_rows=4, max_length=256, weights_dtype=weights_dtype, one_call=one
        )
        for one in (True, False)
    }
    assert decoders[True].one_call and not decoders[False].one_call
    logits = {}
    for one, decoder in decoders.items():
        steps = []
        for _ in range(2):  # the second time after a release: new caches, a new plan
            for slot, prompt in enumerate(prompts):
                decoder.load_row(slot, prefill(model, prompt[:-1]))
            fed = torch.tensor([p[-1] for p in prompts])
            positions = torch.tensor([len(p) - 1 for p in prompts])
            with torch.inference_mode():
                for _ in range(3):
                    steps.append(decoder.step(fed, positions))
                    fed, positions = (fed * 5 + 2) % 1000, positions + 1
                decoder.move_row(2, 0, int(positions[2]))  # row 0 leaves, row 2 takes its slot
                steps.append(decoder.step(fed[[2, 1]], positions[[2, 1]]))
            decoder.release()
        logits[one] = steps
    for one_call, op_by_op in zip(logits[True], logits[False], strict=True):
        assert torch.equal(one_call, op_by_op)


@pytest.mark.skipif(not HAS_COMPILER, reason="no C compiler")
def test_a_prefill_gives_the_model_s_logits_and_the_steps_go_on_from_it(model) -> None:
    prompt = list(range(700, 830))
    decoder = SlotDecoder(model, max_rows=3, max_length=512, weights_dtype="float32")
    assert decoder.can_prefill
    decoder.load_row(2, prefill(model, prompt[:50]))  # a cached prefix of 50 tokens
    with torch.inference_mode():
        logits = decoder.prefill(2, torch.tensor(prompt[50:]), 50)  # [1, V]
        assert logits.shape == (1, decoder.embed.shape[0])
        got = torch.log_softmax(logits[0], -1)
        assert torch.allclose(got, reference_logprobs(model, prompt), atol=1e-4)
        # Its KV is the model's, so the row steps on as from a model prefill.
        for _ in range(3):
            token = int(got.argmax())
            prompt.append(token)
            step = decoder.step(
                torch.tensor([token, token, token]), torch.tensor([0, 0, len(prompt) - 1])
            )
            got = torch.log_softmax(step[2], -1)
            assert torch.allclose(got, reference_logprobs(model, prompt), atol=1e-4)
    with pytest.raises(ValueError, match="one-call step"):
        SlotDecoder(model, max_rows=1, max_length=8, one_call=False).prefill(
            0, torch.tensor([1]), 0
        )


def test_bf16_weights_stay_close_and_unknown_types_are_refused(model) -> None:
    prompt = list(range(500, 540))
    decoder = SlotDecoder(model, max_rows=1, max_length=256, weights_dtype="bfloat16")
    decoder.load_row(0, prefill(model, prompt[:-1]))
    with torch.inference_mode():
        logits = decoder.step(torch.tensor([prompt[-1]]), torch.tensor([len(prompt) - 1]))
    assert decoder.lm_head.dtype == torch.bfloat16 and logits.dtype == torch.float32
    # bf16 keeps 8 bits of mantissa: close to, not equal to, the fp32 model.
    diff = (torch.log_softmax(logits[0], -1) - reference_logprobs(model, prompt)).abs().max()
    assert 0 < float(diff) < 0.1
    with pytest.raises(ValueError, match="weights_dtype"):
        SlotDecoder(model, max_rows=1, max_length=8, weights_dtype="int3")


@pytest.mark.skipif(not HAS_COMPILER, reason="no C compiler")
def test_a_bfloat16_kv_cache_steps_close_to_float32_and_hands_back_float32(model) -> None:
    prompts = [list(range(300, 300 + n)) for n in (20, 130)]
    steps = {}
    for kv_dtype in ("float32", "bfloat16"):
        decoder = SlotDecoder(
            model, max_rows=2, max_length=256, weights_dtype="float32", kv_dtype=kv_dtype
        )
        assert decoder.kv_dtype == getattr(torch, kv_dtype)
        for slot, prompt in enumerate(prompts):
            decoder.load_row(slot, prefill(model, prompt[:-1]))
        assert decoder.keys[0].dtype == getattr(torch, kv_dtype)
        fed = torch.tensor([p[-1] for p in prompts])
        positions = torch.tensor([len(p) - 1 for p in prompts])
        with torch.inference_mode():
            steps[kv_dtype] = [torch.log_softmax(decoder.step(fed, positions), -1)]
            steps[kv_dtype].append(torch.log_softmax(decoder.step(fed, positions + 1), -1))
        # A row's KV goes back to the prefix cache as float32, for the model's prefill.
        kv = decoder.row_kv(1, len(prompts[1]))
        assert kv[0][0].dtype == torch.float32 and kv[0][0].shape[2] == len(prompts[1])
        want = prefill(model, prompts[1][:-1])[0][0].to(getattr(torch, kv_dtype)).float()
        assert torch.equal(kv[0][0][:, :, :-1], want)
    for exact, narrow in zip(steps["float32"], steps["bfloat16"], strict=True):
        diff = float((exact - narrow).abs().max())
        assert 0 < diff < 0.05  # 8 bits of mantissa in each key and value


def test_the_kv_cache_type_follows_the_weights_where_the_kernel_reads_it(model) -> None:
    def kv(**options):
        return SlotDecoder(model, max_rows=1, max_length=8, **options).kv_dtype

    bf16 = torch.bfloat16 if HAS_COMPILER else torch.float32
    assert kv(weights_dtype="bfloat16") == bf16
    assert kv(weights_dtype="float32") == torch.float32
    assert kv(weights_dtype="bfloat16", kv_dtype="float32") == torch.float32
    # torch's SDPA would widen the whole cache every step: float32 there, and a refusal if asked.
    assert kv(weights_dtype="bfloat16", attention_kernel=False) == torch.float32
    with pytest.raises(ValueError, match="needs the C attention kernel"):
        kv(weights_dtype="float32", kv_dtype="bfloat16", attention_kernel=False)
    with pytest.raises(ValueError, match="kv_dtype must be one of"):
        kv(kv_dtype="int8")


def test_auto_weights_follow_the_cpus_bf16_units(tmp_path) -> None:
    with_units, without, unreadable = tmp_path / "a", tmp_path / "b", tmp_path / "missing"
    with_units.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n")
    without.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_vnni\n")
    assert resolve_weights_dtype("auto", cpuinfo=str(with_units)) == "bfloat16"
    assert resolve_weights_dtype("auto", cpuinfo=str(without)) == "float32"
    assert resolve_weights_dtype("auto", cpuinfo=str(unreadable)) == "float32"
    # An explicit choice is kept, whatever the CPU.
    assert resolve_weights_dtype("float32", cpuinfo=str(with_units)) == "float32"
    assert resolve_weights_dtype("bfloat16", cpuinfo=str(without)) == "bfloat16"
    with pytest.raises(ValueError, match="weights_dtype"):
        resolve_weights_dtype("fp8")
