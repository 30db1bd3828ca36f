"""Bridge smoke run for another Verifiers version's venv (no pytest needed there):

    PYTHONPATH=<repo> <venv>/bin/python tests/verifiers_bridge/bridge_smoke.py <tiny-model dir>

Runs the three classic fixtures through `VerifiersEnv.group_for` against the scripted policy and
asserts every reward is the fixture's reward of that rollout's own decoded tokens. Prints one line
per fixture; exits non-zero on any mismatch. Then the tool fixture (`vf_tools`, hermes template):
where vLLM's tool parsers import, its groups run (rewards = each rollout's own final answer, every
tool result in the masked-out context); where they do not, the bridge must refuse it saying so.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from atroposlib.envs.server_handling.server_baseline import APIServerConfig  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from environments.verifiers_env import VerifiersBridgeError, VerifiersEnv, VerifiersEnvConfig  # noqa: E402
from tests.runtime.scripted_policy import ScriptedPolicy  # noqa: E402
from tests.verifiers_bridge.policies import (  # noqa: E402
    calc_policy,
    expected_majority,
    expected_sum,
    guess_policy,
    majority_policy,
    replies,
    sum_policy,
)
from tests.verifiers_bridge.tool_template import tool_tokenizer  # noqa: E402


async def main(tiny: str) -> None:
    import verifiers

    tok = AutoTokenizer.from_pretrained(tiny)
    for fixture, policy_fn in [
        ("vf_sum", sum_policy),
        ("vf_guess", guess_policy),
        ("vf_majority", majority_policy),
    ]:
        with ScriptedPolicy(tok, policy_fn, latency_s=(0.0, 0.03)) as policy:
            config = VerifiersEnvConfig(tokenizer_name=tiny, wandb_name="vf", use_wandb=False, group_size=4,
                                        max_token_length=1024, ensure_scores_are_not_same=False,
                                        vf_env_name="tests.verifiers_bridge.fixtures." + fixture)  # fmt: skip
            server = APIServerConfig(server_type="vllm", model_name="scripted", base_url=policy.base_url,
                                     api_key="x", tokenizer_name=tiny, timeout=30, health_check=False)  # fmt: skip
            env = VerifiersEnv(config, [server])
            await env.setup()
            for item in env.train_items:
                outcome = await env.group_for(item, training=True)
                assert outcome.group is not None, f"{fixture}: {outcome.drop}: {outcome.detail}"
                got = replies(tok, outcome.group)
                scores = outcome.group["scores"]
                if fixture == "vf_sum":
                    want = [expected_sum(r[-1], item.answer) for r in got]
                elif fixture == "vf_guess":
                    want = [float(r[-1] == item.answer) for r in got]
                else:
                    want = expected_majority([r[-1] for r in got], item.answer)
                assert scores == want, f"{fixture} item {item.uid}: scores {scores} != {want} for {got}"
        print(
            f"verifiers {verifiers.__version__} {fixture}: {len(env.train_items)} groups, rewards on their own tokens"
        )

    await tools(tiny, tok)


async def tools(tiny: str, tok: object) -> None:
    import tempfile

    import verifiers

    with tempfile.TemporaryDirectory() as tmp, ScriptedPolicy(tok, calc_policy) as policy:
        config = VerifiersEnvConfig(tokenizer_name=str(tool_tokenizer(Path(tiny), Path(tmp))), wandb_name="vf",
                                    use_wandb=False, group_size=4, max_token_length=2048,
                                    ensure_scores_are_not_same=False,
                                    vf_env_name="tests.verifiers_bridge.fixtures.vf_tools")  # fmt: skip
        server = APIServerConfig(server_type="vllm", model_name="scripted", base_url=policy.base_url,
                                 api_key="x", tokenizer_name=config.tokenizer_name, timeout=30, health_check=False)  # fmt: skip
        try:
            env = VerifiersEnv(config, [server])
        except VerifiersBridgeError as exc:
            assert "vLLM's tool parsers" in str(exc), exc
            print(f"verifiers {verifiers.__version__} vf_tools: refused loudly ({exc})")
            return
        await env.setup()
        for item in env.train_items:
            outcome = await env.group_for(item, training=True)
            assert outcome.group is not None, f"vf_tools: {outcome.drop}: {outcome.detail}"
            for turns, score, msgs in zip(replies(tok, outcome.group), outcome.group["scores"],
                                          outcome.group["messages"], strict=True):  # fmt: skip
                assert score == float(turns[-1] == f"<answer>{item.answer}</answer>"), (score, turns)
                assert sum(t.count("<tool_call>") for t in turns) == sum(m["role"] == "tool" for m in msgs)
            assert sorted(outcome.group["scores"]) == [0.0, 1.0, 1.0, 1.0], outcome.group["scores"]
    print(
        f"verifiers {verifiers.__version__} vf_tools: {len(env.train_items)} groups, tool calls ran in the env"
    )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
