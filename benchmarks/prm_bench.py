"""PRM scoring throughput: one forward per completion (baseline) vs length-sorted token-budget batches.

Uses the repo's offline tiny chat model (random weights) loaded as a token-classification PRM, so the
numbers measure batching/padding overhead, not model quality. Also reports the max |batched - unbatched|
score difference (the invariant the tests assert).

    python benchmarks/prm_bench.py [--n 64] [--steps 6]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from environments.atropos_runtime.local_model import build_tiny_model  # noqa: E402
from rubrics.prm import PRMScorer, spec  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    path = build_tiny_model(Path(tempfile.gettempdir()) / "rlvr-prm-bench-model")
    scorer = PRMScorer(str(path), spec("trl-token-classification"), max_batch_tokens=16384)
    rng = random.Random(0)
    words = "add the two numbers then we get five so the answer is ten plus three".split()
    items = [
        ("what is the sum", [" ".join(rng.choices(words, k=rng.randint(4, 30))) for _ in range(args.steps)])
        for _ in range(args.n)
    ]
    scorer.score(items[:2])  # warm-up
    t0 = time.perf_counter()
    single = [scorer.score([it])[0] for it in items]
    t_single = time.perf_counter() - t0
    t0 = time.perf_counter()
    batched = scorer.score(items)
    t_batched = time.perf_counter() - t0
    diff = max(
        abs(a - b)
        for s, t in zip(single, batched, strict=True)
        for a, b in zip(s.scores, t.scores, strict=True)
    )
    print(f"\n{args.n} completions x {args.steps} steps, tiny random PRM on CPU")
    print(f"{'scorer':<34}{'wall s':>9}{'items/s':>10}{'speed-up':>10}")
    print(f"{'one forward per item (baseline)':<34}{t_single:>9.2f}{args.n / t_single:>10.1f}{1.0:>9.1f}x")
    print(
        f"{'sorted token-budget batches':<34}{t_batched:>9.2f}{args.n / t_batched:>10.1f}{t_single / t_batched:>9.1f}x"
    )
    print(f"max |batched - unbatched| = {diff:.2e}")


if __name__ == "__main__":
    main()
