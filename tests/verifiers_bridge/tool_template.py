"""A ChatML chat template with Hermes-format tools (written for these tests): tool definitions in the
system turn inside `<tools></tools>`, each call as `<tool_call>\\n{"name": ..., "arguments": ...}\\n
</tool_call>` in the assistant turn, tool results as `<tool_response>` blocks in one user turn (the
layout Qwen2.5 and Hermes models use, which vLLM's `hermes` parser reads). The tiny test model's own
template has no tool support (the bridge refuses tool envs with it); `tool_tokenizer` saves the tiny
tokenizer with this template instead (same vocabulary, same ids)."""

from __future__ import annotations

from pathlib import Path

HERMES_TOOL_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call functions. Signatures within <tools></tools>:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each call return JSON within <tool_call></tool_call> tags:\\n'"
    ' + \'<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n\' }}'
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' and loop.first %}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' + (message.content or '') }}"
    "{%- for call in message.tool_calls or [] %}"
    "{%- set f = call.function if call.function is defined else call %}"
    "{%- if message.content or not loop.first %}{{- '\\n' }}{%- endif %}"
    '{{- \'<tool_call>\\n{"name": "\' + f.name + \'", "arguments": \' }}'
    "{{- f.arguments if f.arguments is string else (f.arguments | tojson) }}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or loop.previtem.role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or loop.nextitem.role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def tool_tokenizer(tiny: Path, out: Path) -> Path:
    """The tiny model's tokenizer saved to `out` with the Hermes tool template (idempotent)."""
    from transformers import AutoTokenizer

    if not (out / "tokenizer_config.json").exists():
        tok = AutoTokenizer.from_pretrained(tiny)
        tok.chat_template = HERMES_TOOL_TEMPLATE
        tok.save_pretrained(out)
    return out
