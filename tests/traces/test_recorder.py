"""The recorder on tiny random Mixtral, Qwen2-MoE and OLMoE models: the trace holds the experts the
model routed to, step by step, and only its sparse layers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from replaybank.errors import ReplayBankError  # noqa: E402
from replaybank.traces import load_trace, save_trace, simulate  # noqa: E402
from replaybank.traces.recorder import find_routers, record  # noqa: E402

SMALL = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128)


def tiny(kind: str) -> Any:
    torch.manual_seed(0)
    if kind == "mixtral":
        config = transformers.MixtralConfig(**SMALL, num_hidden_layers=2, num_local_experts=8, num_experts_per_tok=2)
        return transformers.MixtralForCausalLM(config)
    if kind == "qwen2_moe":  # layers 1 and 3 sparse (decoder_sparse_step=2), with a shared expert
        config = transformers.Qwen2MoeConfig(**SMALL, num_hidden_layers=4, num_experts=6, num_experts_per_tok=2,
                                             moe_intermediate_size=16, shared_expert_intermediate_size=16,
                                             decoder_sparse_step=2)
        return transformers.Qwen2MoeForCausalLM(config)
    config = transformers.OlmoeConfig(**SMALL, num_hidden_layers=2, num_experts=8, num_experts_per_tok=3)
    return transformers.OlmoeForCausalLM(config)


@pytest.mark.parametrize("kind, layers, experts, top_k", [
    ("mixtral", (0, 1), 8, 2), ("qwen2_moe", (1, 3), 6, 2), ("olmoe", (0, 1), 8, 3),
])
def test_trace_holds_what_the_model_routed(kind: str, layers: tuple[int, ...], experts: int, top_k: int) -> None:
    model = tiny(kind)
    prompts = [[1, 5, 9, 11, 3], [2, 7, 30]]
    trace = record(model, prompts, decode_steps=4, meta={"workload": "test"})
    assert trace.layers == layers and trace.num_experts == (experts,) * len(layers) and trace.top_k == top_k
    assert trace.request.tolist() == [0] * 5 + [1] * 5
    assert trace.kind.tolist() == [0, 1, 1, 1, 1] * 2 and trace.tokens.tolist() == [5, 1, 1, 1, 1, 3, 1, 1, 1, 1]
    assert trace.start.tolist() == [0, 5, 6, 7, 8, 0, 3, 4, 5, 6]
    assert trace.meta["workload"] == "test" and trace.meta["model"] == type(model).__name__
    # the same tokens in one uncached forward route the same way (greedy choices redone here)
    for r, prompt in enumerate(prompts):
        seq = list(prompt)
        with torch.no_grad():
            for _ in range(5):  # the prefill and 4 decode steps each choose a token
                seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
            out = model(torch.tensor([seq[:-1]]), output_router_logits=True)
        rows = slice(trace.offsets[5 * r], trace.offsets[5 * r + 5])
        for i, logits in enumerate(out.router_logits):
            want = torch.topk(logits.float().softmax(-1), top_k, dim=-1).indices.numpy()
            assert np.array_equal(np.sort(trace.experts[i, rows], axis=1), np.sort(want, axis=1)), (kind, r, i)
    assert np.isfinite(trace.gates).all() and (trace.gates > 0).all()
    assert simulate(trace, "opt", experts).total.misses <= experts * len(layers)


def test_recorded_trace_round_trips_and_hooks_are_removed(tmp_path: Any) -> None:
    model = tiny("mixtral")
    trace = record(model, [[4, 4, 4]], decode_steps=2)
    save_trace(trace, tmp_path / "t")
    assert np.array_equal(load_trace(tmp_path / "t").experts, trace.experts)
    assert all(not r[1]._forward_hooks for r in find_routers(model))
    with pytest.raises(ReplayBankError, match="prompt of request 0 is empty"):
        record(model, [[]], decode_steps=1)
    assert all(not r[1]._forward_hooks for r in find_routers(model))
    dense = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL, num_hidden_layers=1))
    with pytest.raises(ReplayBankError, match="no sparse MoE block found"):
        record(dense, [[1]], decode_steps=1)


def test_chunked_prefill_and_teacher_forced_decode() -> None:
    model = tiny("mixtral")
    prompt, follow = [1, 5, 9, 11, 3], [7, 8, 2]
    trace = record(model, [prompt], prefill_chunk=2, continuations=[follow])
    assert trace.kind.tolist() == [0, 0, 0, 1, 1, 1] and trace.start.tolist() == [0, 2, 4, 5, 6, 7]
    assert trace.tokens.tolist() == [2, 2, 1, 1, 1, 1]
    # chunks with a KV cache, then the fed continuation: routed as one uncached pass over all 8 tokens
    with torch.no_grad():
        out = model(torch.tensor([prompt + follow]), output_router_logits=True)
    for i, logits in enumerate(out.router_logits):
        want = torch.topk(logits.float().softmax(-1), 2, dim=-1).indices.numpy()
        assert np.array_equal(np.sort(trace.experts[i], axis=1), np.sort(want, axis=1)), i
    with pytest.raises(ReplayBankError, match="prefill_chunk = 0"):
        record(model, [prompt], prefill_chunk=0)
    with pytest.raises(ReplayBankError, match="continuations: 2 for 1 prompts"):
        record(model, [prompt], continuations=[follow, follow])
