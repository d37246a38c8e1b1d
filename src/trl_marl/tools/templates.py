"""How a tool-using agent's turn is written down and read back: the chat template that describes the tools and
renders tool calls and results, the parser that finds the calls in a completion, and the tokens a tool result adds.

trl-marl follows TRL's `GRPOTrainer` (1.16): a tokenizer whose own chat template can render a whole tool-calling
exchange (user -> assistant with `tool_calls` -> tool) and that has a response parser (`tokenizer.response_template`,
or one that TRL's `add_response_schema` knows for its template, e.g. Qwen2.5/Qwen3, Llama 3.1/3.2) is used as it is.
A ChatML tokenizer whose template cannot express tool calls (SmolLM2-Instruct's renders only `content`) gets
[`CHATML_TOOL_TEMPLATE`] instead, for the agents that have tools only: calls are written in the Hermes style
(`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`) and results come back as a `tool` turn. Without tools
that template renders a conversation exactly as plain ChatML does.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from trl.chat_template_utils import add_response_schema, parse_response, supports_tool_calling

from ..utils.text import encodable
from .calling import encodable_json

CHATML_TOOL_TEMPLATE: str = (
    "{%- set ns = namespace(first=0) -%}"
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{{- messages[0]['content'] + '\\n\\n' -}}{%- set ns.first = 1 -%}"
    "{%- endif -%}"
    "{{- 'You can call these tools:\\n<tools>\\n' -}}"
    "{%- for tool in tools -%}{{- (tool | tojson) + '\\n' -}}{%- endfor -%}"
    "{{- '</tools>\\nTo call a tool, write <tool_call>\\n{\"name\": <tool name>, \"arguments\": <JSON object>}\\n"
    "</tool_call> and stop; its result comes back in a tool message. Without a call, your message is your answer."
    "<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages[ns.first:] -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- elif message['content'] -%}"
    "{%- for part in message['content'] -%}{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- if message['role'] == 'assistant' and message.get('tool_calls') -%}"
    "{%- for call in message['tool_calls'] -%}"
    "{%- set fn = call['function'] if call.get('function') else call -%}"
    "{%- if not loop.first or message['content'] -%}{{- '\\n' -}}{%- endif -%}"
    "{{- '<tool_call>\\n{\"name\": ' + (fn['name'] | tojson) + ', \"arguments\": ' -}}"
    "{%- if fn['arguments'] is string -%}{{- fn['arguments'] -}}{%- else -%}{{- fn['arguments'] | tojson -}}"
    "{%- endif -%}"
    "{{- '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
"""A ChatML chat template that can express tool calls (the tool list goes into the system message as JSON schemas;
an assistant's calls are `<tool_call>` blocks of JSON; a result is a `tool` turn). Without tools it renders plain
ChatML: `<|im_start|>{role}\\n{content}<|im_end|>\\n` per message."""

CHATML_RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}
"""The response parser (transformers' `response_template`, read by `tokenizer.parse_response`) of
[`CHATML_TOOL_TEMPLATE`]: the text before the first `<tool_call>` is the content, each `<tool_call>` block's JSON one
call."""


@dataclass(frozen=True)
class ToolFormat:
    """How one agent's tool turns are written and read.

    Attributes:
        chat_template: The chat template that renders the agent's prompts, tool calls and results (None: the
            tokenizer's own).
        response_template: The response parser given to `tokenizer.parse_response` (None: the tokenizer's own
            `response_template` or `response_schema`).
    """

    chat_template: str | None = None
    response_template: dict[str, Any] | None = None

    def template_kwargs(self, chat_template_kwargs: dict | None = None) -> dict[str, Any]:
        """`chat_template_kwargs` with this format's chat template, for `apply_chat_template`."""
        kwargs = dict(chat_template_kwargs or {})
        if self.chat_template is not None:
            kwargs["chat_template"] = self.chat_template
        return kwargs


def resolve_tool_format(tokenizer: Any, agent: int | None = None) -> ToolFormat:
    """The [`ToolFormat`] of an agent with tools whose tokenizer is `tokenizer` (see the module docstring).

    The tokenizer is not changed, except as TRL does: a tokenizer whose template supports tool calls and that has no
    response parser gets the one TRL's `add_response_schema` knows for its template.

    Raises:
        ValueError: The tokenizer's template cannot express tool calls and it is no ChatML tokenizer; the message says
            how to give it one.
    """
    who = "the agent's" if agent is None else f"agent {agent}'s"
    own = getattr(tokenizer, "chat_template", None)
    if own == CHATML_TOOL_TEMPLATE and getattr(tokenizer, "response_template", None) is None:
        return ToolFormat(response_template=CHATML_RESPONSE_TEMPLATE)  # ours, set without its parser
    if own is not None and supports_tool_calling(tokenizer):
        parser = getattr(tokenizer, "response_template", None) or getattr(tokenizer, "response_schema", None)
        if parser is None:
            try:
                add_response_schema(tokenizer)
            except ValueError as error:
                raise ValueError(
                    f"{who} tokenizer's chat template can render tool calls, but no parser is known for it: set "
                    "`tokenizer.response_template` (transformers' response parsing) before creating the trainer."
                ) from error
        return ToolFormat()
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    if "<|im_start|>" in vocab and "<|im_end|>" in vocab:
        return ToolFormat(chat_template=CHATML_TOOL_TEMPLATE, response_template=CHATML_RESPONSE_TEMPLATE)
    raise ValueError(
        f"{who} tokenizer cannot express tool calls: its chat template does not render an assistant's `tool_calls` "
        "and a `tool` message, and it is no ChatML tokenizer (no `<|im_start|>`/`<|im_end|>` tokens) that trl-marl "
        "could give `trl_marl.tools.CHATML_TOOL_TEMPLATE`. Give that agent a tokenizer whose chat template supports "
        "tools (and set `tokenizer.response_template` if TRL does not know the template), or remove its tools."
    )


def use_tool_chat_template(tokenizer: Any) -> Any:
    """Give a ChatML tokenizer (e.g. SmolLM2-Instruct's) [`CHATML_TOOL_TEMPLATE`] and its parser, in place.

    trl-marl does this by itself for the agents that have tools (without changing the tokenizer); call it to use the
    same tokenizer with TRL's `GRPOTrainer(tools=...)`, which needs a tokenizer whose own template and parser
    handle tool calls. Returns the tokenizer.

    Raises:
        ValueError: The tokenizer has no `<|im_start|>` and `<|im_end|>` tokens.
    """
    vocab = tokenizer.get_vocab()
    if "<|im_start|>" not in vocab or "<|im_end|>" not in vocab:
        raise ValueError("`use_tool_chat_template` needs a ChatML tokenizer (with `<|im_start|>` and `<|im_end|>` "
                         "tokens); give other tokenizers a chat template that supports tools.")
    tokenizer.chat_template = CHATML_TOOL_TEMPLATE
    tokenizer.response_template = CHATML_RESPONSE_TEMPLATE
    return tokenizer


def parse_completion(tokenizer: Any, fmt: ToolFormat, ids: list[int], prefix: list[int],
                     tools: list[Any] | None = None) -> dict[str, Any]:
    """The assistant message of one completion (`ids`, generated after `prefix`): `{"role", "content"}` plus
    `"tool_calls"` when it calls tools.

    Whatever the model wrote, this returns a message and raises nothing: a completion whose calls cannot be read is
    plain text (its decoded tokens), as in TRL's `parse_response`. That covers broken or truncated JSON, and any
    error while parsing (TRL's own parser lets a `RecursionError` through, e.g. from JSON nested 1,000 deep, and
    Python's `int()` refuses numbers of more than 4,300 digits), calls that are not `{"name": str, "arguments":
    ...}`, and calls nested deeper than [`~trl_marl.tools.calling.MAX_CALL_DEPTH`] levels. Every string of the
    message (tool names, argument names and values, the content) encodes to UTF-8: a lone surrogate, which a JSON
    escape such as `"\\ud800"` decodes to and no tokenizer encodes, becomes U+FFFD
    ([`~trl_marl.tools.calling.encodable_json`])."""
    try:
        if fmt.response_template is None:
            parsed = parse_response(tokenizer, ids, prefix=prefix, tools=tools or None)
        else:
            parsed = tokenizer.parse_response(ids, schema=fmt.response_template, prefix=prefix)
        return _checked_message(parsed)
    except Exception:  # noqa: BLE001 - whatever the model wrote: its completion is text (RecursionError included)
        return {"role": "assistant", "content": encodable(tokenizer.decode(ids, skip_special_tokens=True))}


def _checked_message(parsed: Any) -> dict[str, Any]:
    """A parsed message, its strings encodable, with well-formed calls or none; raises `ValueError` otherwise."""
    if not isinstance(parsed, dict):
        raise ValueError("the response parser returned no message")
    parsed = encodable_json(parsed)
    if not isinstance(parsed.get("content"), str):
        parsed["content"] = ""
    calls = parsed.get("tool_calls")
    if calls is not None and not _well_formed_calls(calls):
        raise ValueError("malformed tool calls")
    if not calls:
        parsed.pop("tool_calls", None)
    return parsed


def _well_formed_calls(calls: Any) -> bool:
    """Every call is `{"type": "function", "function": {"name": str, "arguments": dict}}` (arguments default {})."""
    if not isinstance(calls, list):
        return False
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return False
        if function.get("arguments") is None:
            function["arguments"] = {}
    return True


def tool_suffix_ids(tokenizer: Any, fmt: ToolFormat, tool_messages: list[dict[str, Any]],
                    chat_template_kwargs: dict | None = None) -> list[int]:
    """The tokens that follow an assistant's tool-calling completion: its tool results as the chat template renders
    them, and the header of the assistant's next message.

    Found as the difference between a short conversation that ends with a tool-calling assistant message and the
    same conversation with `tool_messages` and a generation prompt; the first is cut after its last EOS token, where
    the agent's completion stopped (so `completion + suffix` is what the template would render). The call in that
    conversation names the first result's tool: some templates write the tool's name in the result's header.

    Raises:
        ValueError: The template renders the short conversation differently once results follow (not prefix
            preserving): results cannot be appended token by token.
    """
    kwargs = fmt.template_kwargs(chat_template_kwargs)
    name = tool_messages[0].get("name", "tool") if tool_messages else "tool"
    calls = [{"type": "function", "function": {"name": name, "arguments": {}}}]
    head = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": calls}]
    before = _ids(tokenizer.apply_chat_template(head, tokenize=True, add_generation_prompt=False, **kwargs))
    after = _ids(tokenizer.apply_chat_template(head + copy.deepcopy(tool_messages), tokenize=True,
                                               add_generation_prompt=True, **kwargs))
    eos = tokenizer.eos_token_id
    ends = [i for i, token in enumerate(before) if token == eos]
    if ends:
        before = before[: ends[-1] + 1]
    if after[: len(before)] != before:
        raise ValueError("The chat template renders an assistant's tool call differently once tool results follow "
                         "it, so tool results cannot be appended to a completion: use a prefix-preserving template.")
    return after[len(before):]


def _ids(rendered: Any) -> list[int]:
    if isinstance(rendered, dict) or hasattr(rendered, "keys"):
        rendered = rendered["input_ids"]
    return [int(t) for t in rendered]
