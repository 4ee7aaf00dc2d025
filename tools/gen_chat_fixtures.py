#!/usr/bin/env python3
"""Writes tests/fixtures/chat/: chat templates, sample conversations and transformers' rendering
of each (apply_chat_template(..., tokenize=False)), for tests/chat/test_chat_template.c.

Dev-only (CI never runs it): needs transformers (5.x) and jinja2, e.g.
    /tmp/fixenv/bin/python tools/gen_chat_fixtures.py [--smol MODEL_DIR]

Families:
  smollm2   the official template and special tokens, from the converted default model's
            tokenizer_config.json (tools/default_model/convert_gguf.py writes it); rendered by
            AutoTokenizer(...).apply_chat_template, and the same through render_jinja_template
            with its special tokens (asserted equal).
  qwen2.5, llama3.1, mistral, llama2
            the OFFICIAL chat_template strings of Qwen/Qwen2.5-0.5B-Instruct,
            meta-llama/Llama-3.1-8B-Instruct, mistralai/Mistral-7B-Instruct-v0.1 and
            meta-llama/Llama-2-7b-chat-hf, copied verbatim from public data (each constant below
            names where it was read); rendered by transformers' render_jinja_template.
  constructs
            a template written to exercise every supported construct (namespace, slices,
            loop variables, filters, tests, methods, whitespace control, trim/lstrip blocks).

Each case: messages, tools (or null), add_generation_prompt, extra variables, and either the
expected string or the message of the raise_exception it must raise. strftime_now sees a fixed
clock (NOW_UNIX, UTC), as the C test injects.
"""
import argparse
import calendar
import datetime as _dt
import json
import os
import sys

import transformers.utils.chat_template_utils as ctu
from jinja2.exceptions import TemplateError
from transformers import AutoTokenizer

NOW = _dt.datetime(2024, 7, 26, 9, 30, 0)
NOW_UNIX = calendar.timegm(NOW.timetuple())


class _FixedClock(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW


ctu.datetime = _FixedClock  # strftime_now() reads datetime.now()

# Qwen/Qwen2.5-0.5B-Instruct: OFFICIAL chat_template (tokenizer_config.json), verbatim, as carried by
# a Swift Jinja port's test suite (ChatTemplateTests.swift, @Test("Qwen Qwen2.5-0.5B-Instruct"); public code
# index id 23213422446), unescaped from its Swift literal. Other public copies end with one more "\n" after the last endif; trim_blocks
# removes it, so the rendering is the same either way.
QWEN25 = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}"""

# meta-llama/Llama-3.1-8B-Instruct (named "meta-llama/Meta-Llama-3.1-8B-Instruct"): OFFICIAL chat_template,
# verbatim Python literal from an OpenVINO tokenizers test data module (get_tokenizer_configs(); code index
# id 5847169310); cross-checked identical with a second copy (a distillation config naming
# meta-llama/Llama-3.1-8B-Instruct as student; id 28257702141). Uses a fixed date_string "26 Jul 2024" (no strftime_now).
LLAMA31 = "{{- bos_token }}\n{%- if custom_tools is defined %}\n    {%- set tools = custom_tools %}\n{%- endif %}\n{%- if not tools_in_user_message is defined %}\n    {%- set tools_in_user_message = true %}\n{%- endif %}\n{%- if not date_string is defined %}\n    {%- set date_string = \"26 Jul 2024\" %}\n{%- endif %}\n{%- if not tools is defined %}\n    {%- set tools = none %}\n{%- endif %}\n\n{#- This block extracts the system message, so we can slot it into the right place. #}\n{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content']|trim %}\n    {%- set messages = messages[1:] %}\n{%- else %}\n    {%- set system_message = \"\" %}\n{%- endif %}\n\n{#- System message + builtin tools #}\n{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n{%- if builtin_tools is defined or tools is not none %}\n    {{- \"Environment: ipython\\n\" }}\n{%- endif %}\n{%- if builtin_tools is defined %}\n    {{- \"Tools: \" + builtin_tools | reject('equalto', 'code_interpreter') | join(\", \") + \"\\n\\n\"}}\n{%- endif %}\n{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n{%- if tools is not none and not tools_in_user_message %}\n    {{- \"You have access to the following functions. To call a function, please respond with JSON for a function call.\" }}\n    {{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.' }}\n    {{- \"Do not use variables.\\n\\n\" }}\n    {%- for t in tools %}\n        {{- t | tojson(indent=4) }}\n        {{- \"\\n\\n\" }}\n    {%- endfor %}\n{%- endif %}\n{{- system_message }}\n{{- \"<|eot_id|>\" }}\n\n{#- Custom tools are passed in a user message with some extra guidance #}\n{%- if tools_in_user_message and not tools is none %}\n    {#- Extract the first user message so we can plug it in here #}\n    {%- if messages | length != 0 %}\n        {%- set first_user_message = messages[0]['content']|trim %}\n        {%- set messages = messages[1:] %}\n    {%- else %}\n        {{- raise_exception(\"Cannot put tools in the first user message when there's no first user message!\") }}\n{%- endif %}\n    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}\n    {{- \"Given the following functions, please respond with a JSON for a function call \" }}\n    {{- \"with its proper arguments that best answers the given prompt.\\n\\n\" }}\n    {{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.' }}\n    {{- \"Do not use variables.\\n\\n\" }}\n    {%- for t in tools %}\n        {{- t | tojson(indent=4) }}\n        {{- \"\\n\\n\" }}\n    {%- endfor %}\n    {{- first_user_message + \"<|eot_id|>\"}}\n{%- endif %}\n\n{%- for message in messages %}\n    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}\n        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n    {%- elif 'tool_calls' in message %}\n        {%- if not message.tool_calls|length == 1 %}\n            {{- raise_exception(\"This model only supports single tool-calls at once!\") }}\n        {%- endif %}\n        {%- set tool_call = message.tool_calls[0].function %}\n        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}\n            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n            {{- \"<|python_tag|>\" + tool_call.name + \".call(\" }}\n            {%- for arg_name, arg_val in tool_call.arguments | items %}\n                {{- arg_name + '=\"' + arg_val + '\"' }}\n                {%- if not loop.last %}\n                    {{- \", \" }}\n                {%- endif %}\n                {%- endfor %}\n            {{- \")\" }}\n        {%- else  %}\n            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n            {{- '{\"name\": \"' + tool_call.name + '\", ' }}\n            {{- '\"parameters\": ' }}\n            {{- tool_call.arguments | tojson }}\n            {{- \"}\" }}\n        {%- endif %}\n        {%- if builtin_tools is defined %}\n            {#- This means we're in ipython mode #}\n            {{- \"<|eom_id|>\" }}\n        {%- else %}\n            {{- \"<|eot_id|>\" }}\n        {%- endif %}\n    {%- elif message.role == \"tool\" or message.role == \"ipython\" %}\n        {{- \"<|start_header_id|>ipython<|end_header_id|>\\n\\n\" }}\n        {%- if message.content is mapping or message.content is iterable %}\n            {{- message.content | tojson }}\n        {%- else %}\n            {{- message.content }}\n        {%- endif %}\n        {{- \"<|eot_id|>\" }}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n"

# mistralai/Mistral-7B-Instruct-v0.1: OFFICIAL chat_template (current revision, with the optional system
# message), verbatim Python literal from the same OpenVINO tokenizers test data module (id 5847169310).
# Not cross-checked against a second copy naming v0.1; the identical text appears in other public
# copies (e.g. id 715635967). A Rust test suite (id 16995041200) carries an OLDER revision under the same
# name (no system message, eos_token + ' '); the current one is used here.
MISTRAL = "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] %}\n    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n{%- endif %}\n\n{{- bos_token }}\n{%- for message in loop_messages %}\n    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}\n    {%- endif %}\n    {%- if message['role'] == 'user' %}\n        {%- if loop.first and system_message is defined %}\n            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n        {%- else %}\n            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n        {%- endif %}\n    {%- elif message['role'] == 'assistant' %}\n        {{- ' ' + message['content'] + eos_token}}\n    {%- else %}\n        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}\n    {%- endif %}\n{%- endfor %}\n"

# meta-llama/Llama-2-7b-chat-hf: OFFICIAL chat_template, verbatim; source: a Go llama.cpp-/props emulator
# quoting "meta-llama/Llama-2-7b-chat-hf's tokenizer_config.json" (Go raw string; id 58355267279);
# cross-checked identical with a Rust test suite carrying meta-llama/Llama-2-13b-chat-hf's (id 16995041200).
LLAMA2 = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}"
    "{% endif %}{% endfor %}"
)

# Every supported construct, with indentation that trim_blocks / lstrip_blocks must handle.
CONSTRUCTS = r"""{# a comment #}
{% set ns = namespace(count=0, roles=[], last='') %}
{% for m in messages %}
    {% set ns.count = ns.count + 1 %}
    {% set ns.roles = ns.roles + [m.role] %}
    {% if loop.first %}first:{{ loop.index }}/{{ loop.length }}{% elif loop.last %}last:{{ loop.index0 }}{% else %}mid:{{ loop.revindex }}{% endif %}
  [{{ m['role'] | upper }}|{{ m.role | capitalize }}] {{ m.content | trim }}
    {%- if m.content.startswith('Hi') %} (greets){% endif %}
    {%- if m.content.endswith('?') %} (asks){% endif %}
    {%- if 'x' in m.content %} (has x){% endif %}
    {%- if m.role not in ['user', 'assistant'] %} (other){% endif %}

    {% set ns.last = m.content[::-1] %}
{% endfor %}
count={{ ns.count }} roles={{ ns.roles | join(',') }} rev={{ ns.last }}
first={{ (messages | first).role }} last={{ (messages | last)['role'] }} n={{ messages | length }}
slice={{ messages[1:] | length }} {{ messages[:1] | length }} {{ 'abcdef'[1:4] }} {{ 'abcdef'[-2:] }} {{ [1,2,3,4,5][::2] }}
arith={{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ 7 % 3 }} {{ -7 // 2 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 1.5 + 1 }} {{ 10 - 2.25 }}
strs={{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ '  pad  '.strip() }}|{{ 'x,y,,z'.split(',') }} {{ ' a  b '.split() }}
{{- ' ' ~ 'Hello World'.lower() }} {{ 'hello world'.title() }} {{ 'a-b-c'.replace('-', '+') }} {{ 'abc' | replace('b', 'B') }}
tests={{ x is defined }} {{ none is none }} {{ 'a' is string }} {{ {} is mapping }} {{ 3 is odd }} {{ 4 is even }} {{ 1 is number }} {{ [] is iterable }} {{ 9 is divisibleby 3 }}
bool={{ true and 'yes' }} {{ false or 'no' }} {{ not [] }} {{ 1 if 0 else 2 }} {{ 'y' if messages else 'n' }} {{ 1 < 2 }} {{ 'b' >= 'a' }} {{ 1 == 1.0 }} {{ [1,2] == [1,2] }}
default={{ missing | default('dflt') }} {{ '' | default('e', true) }} {{ none | default('keep') }}
dict={% for k, v in {'b': 1, 'a': [1, 'two', none, true, 2.5]} | items %}{{ k }}={{ v }};{% endfor %} {{ {'k': 'v'}.get('k') }} {{ {'k': 'v'}.get('z', 'zz') }} {{ {'p': 1}.keys() | list }}
json={{ {'name': 'f', 'n': [1, 2.0, 'ü"\n'], 'o': {}, 'e': [], 't': true, 'z': none} | tojson }}
{{ {'a': [1, {'b': 'c'}]} | tojson(indent=2) }}
{{ {'b': 1, 'a': 2} | tojson(separators=[',', ':'], sort_keys=true) }} {{ {'b': 1, 'a': 2} | tojson(indent='\t') }}
{{ 'ü' | tojson(ensure_ascii=true) }} {{ tools | tojson }}
{%- for t in (tools or []) if t.type == 'function' %}
    {{- '\n' ~ loop.index ~ ':' ~ t.function.name }}
    {%- if loop.last %}{{ '.' }}{% endif %}
{%- endfor %}
{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}
{% for x in [] %}never{% else %}empty-else{% endfor %}
{% for c in 'héllo' %}{{ c }}.{% endfor %} {{ 'héllo' | length }} {{ 'héllo'[1] }} {{ [3, 1, 2] | reverse | list }}
sel={{ [1, 2, 3, 4] | select('odd') | list }} {{ ['a', 'b', 'a'] | reject('equalto', 'a') | list }} {{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join('/') }}
date={{ strftime_now('%Y-%m-%d %H:%M %b %A') }}
{%- if add_generation_prompt %}

  <gen>
{%- endif %}
    {% if true %}
  kept-indent
    {% endif %}
{{ bos_token }}{{ eos_token }}{{ extra_var | default('no-extra') }}
"""

SYSTEM = {"role": "system", "content": "You are a concise assistant."}
U1 = {"role": "user", "content": "Hi! What is 2+2?"}
A1 = {"role": "assistant", "content": "4."}
U2 = {"role": "user", "content": "And times three?"}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city — «ünïcode» ok",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "The city"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    },
]
TOOL_CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {"type": "function", "function": {"name": "get_weather",
                                          "arguments": {"city": "Zürich", "unit": "celsius"}}}
    ],
}
TOOL_RESULT = {"role": "tool", "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"}
TOOL_RESULT2 = {"role": "tool", "content": "humidity 40%"}


def conversations(with_system=True):
    convs = {
        "single_user": [U1],
        "multi_turn": [U1, A1, U2],
        "unicode": [{"role": "user", "content": "Grüße 🌍👩‍💻 日本語 e\u0301 مرحبا — ‘quotes’ \"dq\" 'sq'"},
                    {"role": "assistant", "content": "¡Hola! 👍🏽"},
                    {"role": "user", "content": "Ω≈ç√∫ ∑ ∞ \u200d zero-width joiner"}],
        "whitespace": [{"role": "user", "content": "  leading and trailing  \n\n\tTabbed line\n   "},
                       {"role": "assistant", "content": "\n\nreply with blank lines\n\n"},
                       {"role": "user", "content": "   "}],
        "assistant_last": [U1, A1],
        "empty_content": [{"role": "user", "content": ""}],
    }
    if with_system:
        convs["system_user"] = [SYSTEM, U1]
        convs["system_multi_turn"] = [SYSTEM, U1, A1, U2]
        convs["system_whitespace"] = [{"role": "system", "content": "\n  Be brief.  \n"}, U1]
    return convs


def render(template, specials, messages, tools, agp, extra):
    return ctu.render_jinja_template(
        conversations=[messages], tools=tools, chat_template=template,
        add_generation_prompt=agp, **specials, **(extra or {}))[0][0]


def make_cases(template, specials, convs, tools_cases=(), error_cases=(), extras=()):
    cases = []
    items = [(n, m, None, None) for n, m in convs.items()] + list(tools_cases) + list(extras)
    for name, msgs, tools, extra in items:
        for agp in (False, True):
            case = {"name": f"{name}{'+gen' if agp else ''}", "messages": msgs, "tools": tools,
                    "add_generation_prompt": agp, "extra": extra}
            case["expected"] = render(template, specials, msgs, tools, agp, extra)
            cases.append(case)
    for name, msgs, tools, want in error_cases:
        try:
            render(template, specials, msgs, tools, True, None)
        except TemplateError as e:
            assert str(e) == want, (str(e), want)
            cases.append({"name": name, "messages": msgs, "tools": tools,
                          "add_generation_prompt": True, "extra": None, "error": str(e)})
            continue
        raise SystemExit(f"{name}: expected raise_exception")
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smol", default="/tmp/smolout")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                   "fixtures", "chat"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    families = []

    # SmolLM2: the official template, through the real tokenizer too
    with open(os.path.join(args.smol, "tokenizer_config.json"), encoding="utf-8") as f:
        smol_cfg = json.load(f)
    tok = AutoTokenizer.from_pretrained(args.smol)
    smol_specials = tok.special_tokens_map
    smol_cases = make_cases(smol_cfg["chat_template"], smol_specials, conversations())
    for case in smol_cases:
        via_tok = tok.apply_chat_template(case["messages"], tokenize=False,
                                          add_generation_prompt=case["add_generation_prompt"])
        assert via_tok == case["expected"], case["name"]
    keep = {k: smol_cfg[k] for k in ("chat_template", "bos_token", "eos_token", "unk_token",
                                     "pad_token", "add_bos_token", "add_eos_token")
            if k in smol_cfg}
    with open(os.path.join(args.out, "smollm2_tokenizer_config.json"), "w",
              encoding="utf-8") as f:
        json.dump(keep, f, ensure_ascii=False, indent=2)
        f.write("\n")
    families.append({"name": "smollm2", "source": "official (SmolLM2-135M-Instruct)",
                     "config": "smollm2_tokenizer_config.json",
                     "template": smol_cfg["chat_template"], "special_tokens": smol_specials,
                     "cases": smol_cases})

    qwen_sp = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    tools_cases = [
        ("tools_system", [SYSTEM, U1], TOOLS, None),
        ("tools_no_system", [U1], TOOLS, None),
        ("tools_call_and_result", [U1, TOOL_CALL, TOOL_RESULT, TOOL_RESULT2], TOOLS, None),
    ]
    families.append({"name": "qwen2.5", "source": "official (Qwen/Qwen2.5-0.5B-Instruct)",
                     "template": QWEN25, "special_tokens": qwen_sp,
                     "cases": make_cases(QWEN25, qwen_sp, conversations(), tools_cases)})

    llama_sp = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
    llama_tools = [
        ("tools_system", [SYSTEM, U1], TOOLS, None),
        ("tools_call_and_result", [U1, TOOL_CALL, TOOL_RESULT], TOOLS, None),
        ("tools_in_system", [SYSTEM, U1], TOOLS, {"tools_in_user_message": False}),
    ]
    llama_extras = [
        ("date_string", [SYSTEM, U1], None, {"date_string": "01 Jan 2025"}),
        ("builtin_tools", [U1, {"role": "assistant", "tool_calls": [
            {"function": {"name": "brave_search", "arguments": {"query": "weather"}}}]}],
         None, {"builtin_tools": ["brave_search", "code_interpreter", "wolfram_alpha"]}),
    ]
    llama_errors = [
        ("two_tool_calls", [U1, {"role": "assistant", "tool_calls": [
            TOOL_CALL["tool_calls"][0], TOOL_CALL["tool_calls"][0]]}], None,
         "This model only supports single tool-calls at once!"),
        ("tools_without_user", [SYSTEM], TOOLS,
         "Cannot put tools in the first user message when there's no first user message!"),
    ]
    families.append({"name": "llama3.1", "source": "official (meta-llama/Llama-3.1-8B-Instruct)",
                     "template": LLAMA31, "special_tokens": llama_sp,
                     "cases": make_cases(LLAMA31, llama_sp, conversations(), llama_tools,
                                         llama_errors, llama_extras)})

    mistral_sp = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    alt = "Conversation roles must alternate user/assistant/user/assistant/..."
    mistral_alt = "After the optional system message, c" + alt[1:]
    mistral_errors = [
        ("wrong_order", [U1, U2], None, mistral_alt),
        ("assistant_first", [A1, U1], None, mistral_alt),
        ("system_not_first", [U1, SYSTEM], None,
         "Only user and assistant roles are supported, with the exception of an initial optional "
         "system message!"),
        ("system_then_assistant", [SYSTEM, A1, U1], None, mistral_alt),
    ]
    families.append({"name": "mistral", "source": "official (mistralai/Mistral-7B-Instruct-v0.1)",
                     "template": MISTRAL, "special_tokens": mistral_sp,
                     "cases": make_cases(MISTRAL, mistral_sp, conversations(), (),
                                         mistral_errors)})
    llama2_errors = [("wrong_order", [SYSTEM, U1, U2], None, alt)]
    families.append({"name": "llama2", "source": "official (meta-llama/Llama-2-7b-chat-hf)",
                     "template": LLAMA2, "special_tokens": mistral_sp,
                     "cases": make_cases(LLAMA2, mistral_sp, conversations(), (),
                                         llama2_errors)})

    cons_sp = {"bos_token": "<s>", "eos_token": "</s>"}
    cons_extras = [("tools_extra", [SYSTEM, U1, A1], TOOLS, {"extra_var": "EXTRA"})]
    families.append({"name": "constructs", "source": "written to exercise the subset",
                     "template": CONSTRUCTS, "special_tokens": cons_sp,
                     "cases": make_cases(CONSTRUCTS, cons_sp, conversations(), (), (),
                                         cons_extras)})

    out = {"generator": "tools/gen_chat_fixtures.py",
           "transformers": __import__("transformers").__version__,
           "jinja2": __import__("jinja2").__version__,
           "now_unix": NOW_UNIX, "families": families}
    with open(os.path.join(args.out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n = sum(len(fam["cases"]) for fam in families)
    print(f"wrote {n} cases in {len(families)} families to {args.out}")


if __name__ == "__main__":
    sys.exit(main())
