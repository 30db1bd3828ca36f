"""A verified, torch-free stand-in for a transformers fast tokenizer (what the runtime needs of it).

Importing transformers costs ~2-3 s on a loaded 2-core machine before any tokenizer exists, and
ManagedServer / the token servers only use five things: `apply_chat_template(..., tokenize=False)`,
`encode`, `decode`, and the special token ids. A `SnapshotTokenizer` is a copy of exactly the state
those calls read in a real tokenizer: its Rust `tokenizers.Tokenizer` (saved from the real one, so
the vocabulary, normaliser, pre-tokeniser, added tokens and post-processor are the ones transformers
built), its chat template and special-tokens map, and its decode clean-up and special-token split
flags. It renders templates in a Jinja environment configured as transformers configures its own
(sandboxed, `trim_blocks`, `lstrip_blocks`, loop controls, a `{% generation %}` tag, `tojson`
without HTML escaping, `raise_exception`, `strftime_now`).

Contract:
* `snapshot(real)` returns the state to store, or None when the tokenizer has anything the copy
  does not reproduce (a non-fast tokenizer, several chat templates, decode clean-up on);
  `disagreements(real)` checks the copy against the real tokenizer on probe texts and chats (encode
  with and without special tokens, decode with and without skipping them, templates with and
  without a generation prompt). `environments/atropos_runtime/lazy_imports.py` only uses a snapshot that passed.
* Every call or argument the copy does not implement (batched input, `tokenize=True`, padding,
  tensors, callables as tools, any other attribute) goes to the real tokenizer, loaded on first
  need, so behaviour never differs: only start-up time does.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

_STATE_FIELDS = (
    "name_or_path",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "unk_token_id",
    "bos_token",
    "eos_token",
    "pad_token",
    "unk_token",
    "model_max_length",
    "padding_side",
    "truncation_side",
)
# apply_chat_template arguments that are not template variables: the copy hands those calls over.
_NOT_TEMPLATE_VARS = frozenset(
    {"padding", "truncation", "max_length", "return_tensors", "return_dict", "return_assistant_tokens_mask",
     "tokenizer_kwargs", "documents", "chat_template", "continue_final_message"}
)  # fmt: skip

PROBE_TEXTS = (
    "",
    "Hello world",
    "  two leading spaces, trailing  ",
    "tabs\tand\nnew\n\nlines\r\n",
    "ünïcödé 漢字 🙂 \u200b zero-width",
    "What is 12345 + 678.9? \\boxed{13023.9}",
    "def f(x):\n    return x ** 2  # code\n",
    "<|im_start|>user\nhi<|im_end|>\n<|endoftext|><s></s>[INST]",
    "<think>reasoning</think><answer>42</answer>",
)
PROBE_CHATS: tuple[list[dict[str, str]], ...] = (
    [{"role": "user", "content": "What is 2 + 2?"}],
    [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Name a colour."}],
    [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Say hi"},
        {"role": "assistant", "content": "hi <think>x</think>"},
        {"role": "user", "content": "Again, with ünïcödé:\n\n  indented"},
    ],
)


def snapshot(real: Any) -> dict[str, Any] | None:
    """The state a copy of `real` needs (JSON-serialisable), or None if a copy would not be exact."""
    backend = getattr(real, "_tokenizer", None)
    template = getattr(real, "chat_template", None)
    if backend is None or not isinstance(template, str) or getattr(real, "is_fast", True) is False:
        return None
    if _cleans_up(real):
        return None
    special = getattr(real, "special_tokens_map", None)
    if not isinstance(special, Mapping):
        return None
    state: dict[str, Any] = {field: getattr(real, field, None) for field in _STATE_FIELDS}
    state.update(
        chat_template=template,
        special_tokens_map=dict(special),
        split_special_tokens=bool(getattr(real, "split_special_tokens", False)),
        backend=backend.to_str(),
        real_class=f"{type(real).__module__}:{type(real).__qualname__}",
    )
    try:
        json.dumps(state)
    except (TypeError, ValueError):
        return None
    return state


def _cleans_up(real: Any) -> bool:
    """Whether `real.decode` post-processes the text (transformers skips it for BPE unless forced)."""
    if not getattr(real, "clean_up_tokenization_spaces", False):
        return False
    bpe = type(real._tokenizer.model).__name__ == "BPE"
    return not bpe or bool(
        getattr(real, "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output", False)
    )


class SnapshotTokenizer:
    """`encode` / `decode` / `apply_chat_template(tokenize=False)` of a stored tokenizer state; every
    other use is served by the real tokenizer (`load_real()`, called at most once)."""

    def __init__(self, state: Mapping[str, Any], load_real: Callable[[], Any]) -> None:
        from tokenizers import Tokenizer

        self._state = dict(state)
        self._load_real = load_real
        self._real: Any = None
        self._lock = threading.Lock()
        self._backend = Tokenizer.from_str(state["backend"])
        self._backend.no_truncation()  # what transformers' encode sets for a plain call
        self._backend.no_padding()
        self._backend.encode_special_tokens = state["split_special_tokens"]
        self._template: Any = None
        self._template_globals: dict[str, Any] = {}
        for field in _STATE_FIELDS:
            setattr(self, field, state[field])
        self.chat_template: str = state["chat_template"]
        self.special_tokens_map: dict[str, Any] = dict(state["special_tokens_map"])
        self.is_fast = True

    # -------------------------------------------------------------- the copied calls
    def encode(self, text: Any, add_special_tokens: bool = True, **kwargs: Any) -> list[int]:
        if kwargs or not isinstance(text, str):
            return self.real.encode(text, add_special_tokens=add_special_tokens, **kwargs)
        return self._backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, token_ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> Any:
        plain = isinstance(token_ids, list | tuple) and set(map(type, token_ids)) <= {int}  # C speed
        if kwargs or not plain:
            return self.real.decode(token_ids, skip_special_tokens=skip_special_tokens, **kwargs)
        return self._backend.decode(list(token_ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(
        self,
        conversation: Any,
        tools: Sequence[Any] | None = None,
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        **kwargs: Any,
    ) -> Any:
        simple = (
            not tokenize
            and isinstance(conversation, list | tuple)
            and conversation
            and all(isinstance(m, Mapping) for m in conversation)
            and (tools is None or all(isinstance(t, Mapping) for t in tools))
            and not (_NOT_TEMPLATE_VARS & kwargs.keys())
        )
        if not simple:
            return self.real.apply_chat_template(
                conversation,
                tools=tools,
                add_generation_prompt=add_generation_prompt,
                tokenize=tokenize,
                **kwargs,
            )
        template = self._compiled()
        variables = {
            **self.special_tokens_map,
            **kwargs,
            "messages": conversation,
            "tools": list(tools) if tools is not None else None,
            "documents": None,
            "add_generation_prompt": add_generation_prompt,
        }
        return _render(template, self._template_globals, variables)

    # -------------------------------------------------------------- everything else
    @property
    def real(self) -> Any:
        with self._lock:
            if self._real is None:
                self._real = self._load_real()
            return self._real

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") or attr in ("_state", "_real", "_lock", "_load_real"):
            raise AttributeError(attr)  # copy/pickle probes, or a half-built instance
        return getattr(self.real, attr)

    def __len__(self) -> int:
        return len(self.real)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.real(*args, **kwargs)

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (_same, (self.real,))  # pickles / deep-copies as the real tokenizer

    def __repr__(self) -> str:
        return f"SnapshotTokenizer({self.name_or_path!r}, of {self._state['real_class']})"

    def _compiled(self) -> Any:
        if self._template is None:
            template = _jinja_environment().from_string(self.chat_template)
            self._template_globals = dict(template.globals)
            self._template = template
        return self._template

    # -------------------------------------------------------------- verification
    def disagreements(self, real: Any) -> list[str]:
        """Where this copy and `real` differ on the probes (empty list: they agree)."""
        problems = []
        for field in _STATE_FIELDS:
            if getattr(real, field, None) != getattr(self, field):
                problems.append(f"{field}: {getattr(real, field, None)!r} != {getattr(self, field)!r}")
        texts = list(PROBE_TEXTS) + [str(v) for v in self.special_tokens_map.values()]
        for chat in PROBE_CHATS:
            for gen in (True, False):
                want = real.apply_chat_template(chat, tokenize=False, add_generation_prompt=gen)
                got = self.apply_chat_template(chat, tokenize=False, add_generation_prompt=gen)
                if want != got:
                    problems.append(f"chat template (add_generation_prompt={gen}): {got!r} != {want!r}")
                texts.append(want)
        for text in texts:
            for special in (True, False):
                want_ids = real.encode(text, add_special_tokens=special)
                got_ids = self.encode(text, add_special_tokens=special)
                if want_ids != got_ids:
                    problems.append(f"encode({text[:40]!r}, add_special_tokens={special})")
                    continue
                for skip in (True, False):
                    if real.decode(want_ids, skip_special_tokens=skip) != self.decode(
                        got_ids, skip_special_tokens=skip
                    ):
                        problems.append(f"decode({text[:40]!r}, skip_special_tokens={skip})")
        return problems


def _render(template: Any, template_globals: dict[str, Any], variables: dict[str, Any]) -> str:
    """`template.render(**variables)` with the template's globals merged once (`template_globals`,
    `dict(template.globals)`): jinja's `render` copies them out of a ChainMap walked in Python twice
    per call, ~5% of a multi-turn env's CPU (a render per turn). The context is the one `render`
    builds (the globals, the call's variables on top) and errors are raised as `render` raises them."""
    env = template.environment
    context = env.context_class(
        env, {**template_globals, **variables}, template.name, template.blocks, globals=template_globals
    )
    try:
        return env.concat(template.root_render_func(context))
    except Exception:  # noqa: BLE001 - re-raised by jinja, with the template's line in the traceback
        env.handle_exception()
        raise  # handle_exception always raises


def _same(obj: Any) -> Any:
    return obj


_env_lock = threading.Lock()
_env: Any = None


def _jinja_environment() -> Any:
    """A Jinja environment with the settings, filters and globals transformers renders templates with."""
    global _env
    with _env_lock:
        if _env is None:
            import jinja2
            from jinja2.ext import Extension, loopcontrols
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            class GenerationTag(Extension):
                """`{% generation %}...{% endgeneration %}` renders its body (tracking is off)."""

                tags = {"generation"}

                def parse(self, parser: Any) -> Any:
                    lineno = next(parser.stream).lineno
                    body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
                    return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

                def _body(self, caller: Any) -> str:
                    return caller()

            def raise_exception(message: str) -> None:
                raise jinja2.exceptions.TemplateError(message)

            def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
                       sort_keys: bool = False) -> str:  # fmt: skip
                return json.dumps(
                    x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
                )

            env = ImmutableSandboxedEnvironment(
                trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols]
            )
            env.filters["tojson"] = tojson
            env.globals["raise_exception"] = raise_exception
            env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
            _env = env
        return _env
