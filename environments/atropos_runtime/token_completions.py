"""vLLM's `/v1/completions` token-id wire format, as the runtime reads it.

Requests carry token-id prompts with `return_token_ids`, `return_tokens_as_token_ids` and
`logprobs=0`; each choice comes back with `token_ids`, per-token `logprobs.token_logprobs`, the
echoed `prompt_token_ids` and a `finish_reason`. With several prompts in one request, choice
`i * n + j` is sample `j` of prompt `i`. Anything else is an `InferenceError` naming what is wrong.
"""

from __future__ import annotations

from typing import Any

from environments.atropos_runtime.completion_batcher import Deliver, Samples


class InferenceError(RuntimeError):
    """An inference server answered with something unusable (the message says what)."""


def parse_token_completions(payload: dict, prompts: list[list[int]], n: int) -> list[Samples]:
    """Validate a vLLM `/v1/completions` body for `prompts` sent with `return_token_ids` and
    `logprobs=0`: `len(prompts) * n` choices, choice `i * n + j` sampled from `prompts[i]`.
    Returns `(ids, logprobs, finish_reasons)` per prompt."""
    choices = sorted(payload.get("choices") or [], key=lambda c: c.get("index", 0))
    if len(choices) != len(prompts) * n:
        raise InferenceError(f"asked for {len(prompts)} x n={n} completions, got {len(choices)}")
    return [prompt_samples(choices[i * n : (i + 1) * n], prompt) for i, prompt in enumerate(prompts)]


def prompt_samples(choices: list[dict[str, Any]], prompt: list[int]) -> Samples:
    """One prompt's choices, in order, validated (echoed prompt ids, ids and logprobs present, as
    many of each, none missing) and returned as `(ids, logprobs, finish_reasons)`."""
    ids_list, lps_list, reasons = [], [], []
    for choice in choices:
        echoed = choice.get("prompt_token_ids")
        if echoed is not None and list(echoed) != prompt:
            raise InferenceError("server sampled from a different prompt than the one sent")
        ids = choice.get("token_ids")
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
        if ids is None or logprobs is None:
            raise InferenceError("response lacks token_ids/logprobs: is this a vLLM OpenAI server?")
        if len(ids) != len(logprobs):
            raise InferenceError(f"{len(ids)} token ids but {len(logprobs)} logprobs")
        if None in logprobs:
            raise InferenceError("a sampled token has no logprob")
        ids_list.append(list(map(int, ids)))
        lps_list.append(list(map(float, logprobs)))
        reasons.append(choice.get("finish_reason") or "stop")
    return ids_list, lps_list, reasons


class StreamedChoices:
    """Assembles a streamed `/completions` answer for several prompts (vLLM's chunks: a choice
    `index` = prompt * n + sample, `token_ids` and `logprobs.token_logprobs` per chunk, the echoed
    `prompt_token_ids` in a choice's first chunk, `finish_reason` in its last) and delivers each
    prompt's samples, validated by `prompt_samples`, once its `n` choices finished."""

    def __init__(self, prompts: list[list[int]], n: int, deliver: Deliver) -> None:
        self.prompts, self.n, self.deliver = prompts, n, deliver
        self.choices: list[dict[str, Any]] = [
            {"token_ids": [], "logprobs": {"token_logprobs": []}, "finish_reason": None}
            for i in range(len(prompts) * n)
        ]
        self.unfinished = [n] * len(prompts)

    def add(self, chunk: dict[str, Any]) -> None:
        if "error" in chunk:
            raise InferenceError(f"vLLM stream error: {str(chunk['error'])[:300]}")
        for part in chunk.get("choices") or []:
            index = part.get("index")
            if not isinstance(index, int) or not 0 <= index < len(self.choices):
                raise InferenceError(f"stream chunk for choice {index!r} of {len(self.choices)}")
            choice = self.choices[index]
            if choice["finish_reason"] is not None:
                raise InferenceError(f"stream chunk for choice {index} after it finished")
            if part.get("prompt_token_ids") is not None:
                choice["prompt_token_ids"] = part["prompt_token_ids"]
            ids, logprobs = part.get("token_ids"), (part.get("logprobs") or {}).get("token_logprobs")
            if ids is None or logprobs is None:
                raise InferenceError("stream lacks token_ids/logprobs: is this a vLLM OpenAI server?")
            choice["token_ids"].extend(ids)
            choice["logprobs"]["token_logprobs"].extend(logprobs)
            if part.get("finish_reason") is not None:
                choice["finish_reason"] = part["finish_reason"]
                prompt = index // self.n
                self.unfinished[prompt] -= 1
                if self.unfinished[prompt] == 0:
                    mine = self.choices[prompt * self.n : (prompt + 1) * self.n]
                    self.deliver(prompt, prompt_samples(mine, self.prompts[prompt]))
