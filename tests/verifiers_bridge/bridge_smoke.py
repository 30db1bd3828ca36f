"""Bridge smoke run for another Verifiers version's venv (no pytest needed there):

    PYTHONPATH=<repo> <venv>/bin/python tests/verifiers_bridge/bridge_smoke.py <tiny-model dir>

Runs the three classic fixtures through `VerifiersEnv.group_for` against the scripted policy and
asserts every reward is the fixture's reward of that rollout's own decoded tokens. Prints one line
per fixture; exits non-zero on any mismatch.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from atroposlib.envs.server_handling.server_baseline import APIServerConfig  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from environments.verifiers_env import VerifiersEnv, VerifiersEnvConfig  # noqa: E402
from tests.runtime.scripted_policy import ScriptedPolicy  # noqa: E402
from tests.verifiers_bridge.policies import (  # noqa: E402
    expected_majority,
    expected_sum,
    guess_policy,
    majority_policy,
    replies,
    sum_policy,
)


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


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
