#!/usr/bin/env python3
"""Goldens for bestofn's chat templates and its Jinja interpreter, rendered by jinja2 in the
environment transformers' apply_chat_template compiles templates in (its own
_compile_jinja_template: ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and
loopcontrols, HF's tojson, raise_exception and strftime_now), and encoded by HF `tokenizers`:

    pip install jinja2 tokenizers transformers
    python3 tools/gen_chat_golden.py

writes
- tests/data/chat_golden.json: the real templates of tests/data/chat_templates/ (sources in
  SOURCES.md) on a few conversations, rendered as apply_chat_template(messages,
  add_generation_prompt=True) does, and for the templates whose tokenizer is at hand
  (../shared/tokenizers) the ids of apply_chat_template(tokenize=True) (no special tokens added).
- tests/data/jinja_golden.json: a corpus of small templates, one or more per construct the
  interpreter supports, with jinja2's output (or "error": jinja2's message when it raises).
strftime_now is given a fixed time (2024-07-26 09:05:03) so that the goldens do not move.
"""
import datetime
import json
import os

import jinja2
from tokenizers import Tokenizer
from transformers.utils.chat_template_utils import _compile_jinja_template

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
shared = os.environ.get("BESTOFN_SHARED", os.path.join(root, "..", "shared"))
templates_dir = os.path.join(root, "tests", "data", "chat_templates")
NOW = datetime.datetime(2024, 7, 26, 9, 5, 3)


def compile_template(source):
    t = _compile_jinja_template(source)
    t.environment.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    t.globals["strftime_now"] = t.environment.globals["strftime_now"]
    return t


def render(source, variables):
    try:
        return {"text": compile_template(source).render(**variables)}
    except jinja2.exceptions.TemplateError as e:
        return {"error": "%s: %s" % (type(e).__name__, e)}
    except (TypeError, ValueError, ZeroDivisionError) as e:
        return {"error": "%s: %s" % (type(e).__name__, e)}


# Real templates: (file, tokenizer directory under ../shared/tokenizers or None, bos, eos)
REAL = [
    ("llama3.jinja", "llama3", "<|begin_of_text|>", "<|eot_id|>"),
    ("llama3.1.jinja", "llama3", "<|begin_of_text|>", "<|eot_id|>"),
    ("llama2.jinja", "mistral", "<s>", "</s>"),
    ("mistral-instruct-v0.1.jinja", "mistral", "<s>", "</s>"),
    ("smollm2.jinja", None, "<|im_start|>", "<|im_end|>"),
    ("qwen2.5.jinja", None, None, "<|im_end|>"),
    ("qwen3.jinja", None, None, "<|im_end|>"),
]

CASES = [
    ("", "Write a Python function that returns the sum of a list."),
    ("You are a helpful coding assistant.", "Complete the function:\n\ndef add(a, b):\n    \"\"\"Add two numbers.\"\"\"\n"),
    ("  Be terse.  \n", "\n\n  Fix the bug:  x = [1, 2,, 3]\t\n"),
    ("", "Unicode: naïve café — 日本語 🙂\u00a0"),
    ("System with <|eot_id|> inside", "User with <s> and [INST] inside"),
]


def chat_goldens():
    out = []
    for file, tok_dir, bos, eos in REAL:
        source = open(os.path.join(templates_dir, file)).read()
        tok = Tokenizer.from_file(os.path.join(shared, "tokenizers", tok_dir, "tokenizer.json")) if tok_dir else None
        for system, user in CASES:
            messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
            variables = {"messages": messages, "tools": None, "documents": None, "add_generation_prompt": True}
            if bos is not None:
                variables["bos_token"] = bos
            variables["eos_token"] = eos
            case = {"template": file, "tokenizer": tok_dir, "system": system, "user": user, "variables": variables}
            case.update(render(source, variables))
            if tok and "text" in case:
                case["ids"] = tok.encode(case["text"], add_special_tokens=False).ids
            out.append(case)
    return out


MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "What is 2+2?"}]
V = {"messages": MSGS, "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>", "tools": None}
D = {"d": {"b": 2, "a": [1, 2.5, None, True], "c": {"x": "y\"\n\u00e9"}}, "n": 7, "f": 2.5, "s": "  Hello, World  ", "e": "", "l": [3, 1, 2]}

CORPUS = [
    # text, comments, whitespace control, trim_blocks / lstrip_blocks
    ("text", "plain text\nline two\n", {}),
    ("text_crlf", "a\r\nb\rc\r\n", {}),
    ("comment", "a{# a comment #}b", {}),
    ("comment_trim", "a\n  {# c #}\nb", {}),
    ("ws_minus", "a   {{- 'x' -}}   b", {}),
    ("ws_block_minus", "a  \n {%- if true -%}  \n x {%- endif %}\n b", {}),
    ("trim_blocks", "{% if true %}\nyes\n{% endif %}\nafter", {}),
    ("lstrip_blocks", "  {% if true %}\n    x\n  {% endif %}\n", {}),
    ("lstrip_not_var", "  {{ 'v' }}\n", {}),
    ("lstrip_mid_line", "a  {% if true %}b{% endif %}", {}),
    ("plus_keeps", "  {%+ if true %}x{% endif +%}\ny", {}),
    ("comment_minus", "a  {#- c -#}  b", {}),
    # literals and output
    ("literals", "{{ 1 }} {{ -2 }} {{ 1.5 }} {{ 1e3 }} {{ 'a' \"b\" }} {{ true }} {{ none }} {{ False }}", {}),
    ("floats", "{{ 0.1 + 0.2 }} {{ 1/3 }} {{ 10/2 }} {{ 1e16 }} {{ 1.5e-7 }} {{ 2.0 * 3 }}", {}),
    ("string_escapes", r"{{ 'a\nb\t\'q\' \\ \x41 \u00e9' }}", {}),
    ("list_repr", "{{ [1, 'a', none, true, 2.5, [\"x'y\"]] }}", {}),
    ("dict_repr", "{{ {'a': 1, 'b': 'two'} }} {{ d }}", D),
    ("tuple", "{% for a, b in [(1, 2), (3, 4)] %}{{ a }}{{ b }}{% endfor %} {{ (1, 'a') }} {{ (1,) }} {{ () }} {{ {'a': 1}.items()|list }}", {}),
    # arithmetic and operators
    ("arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }}", {}),
    ("concat", "{{ 'a' ~ 1 ~ none ~ 2.5 }} {{ n ~ s }} {{ 'x' + 2 ~ 3 }}", D),
    ("error_concat_precedence", "{{ 1 + 2 ~ 3 }}", {}),
    ("string_ops", "{{ 'ab' + 'cd' }} {{ 'ab' * 3 }} {{ [1] + [2, 3] }}", {}),
    ("compare", "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ 1 != 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ true == 1 }}", {}),
    ("in", "{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'a' in {'a': 1} }} {{ 'z' not in 'abc' }} {{ 'b' in d }}", D),
    ("logic", "{{ true and 'x' }} {{ 0 or 'y' }} {{ not 0 }} {{ none or [] or 'z' }} {{ 1 and 0 }}", {}),
    ("ternary", "{{ 'a' if n > 5 else 'b' }} {{ 'c' if e else 'd' }} [{{ 'x' if false }}]", D),
    ("neg_filter", "{{ -f|abs }} {{ -(3) }}", D),
    # variables, attributes, subscripts, slices
    ("attr_item", "{{ messages[0].role }} {{ messages[1]['content'] }} {{ messages[-1].content }} {{ d.c.x }} {{ messages.0.role }}", {**D, **V}),
    ("missing", "[{{ nope }}][{{ d.nope }}][{{ d['nope'] }}][{{ l[10] }}]", D),
    ("slices", "{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ s[2:7] }} {{ l[::2] }} {{ 'héllo'[1:3] }}", D),
    ("messages_slice", "{% for m in messages[1:] %}{{ m.role }},{% endfor %}", V),
    # if / elif / else
    ("if_elif", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}other{% endif %} {% endfor %}", {}),
    ("if_truth", "{% if e %}a{% endif %}{% if l %}b{% endif %}{% if {} %}c{% endif %}{% if 0.0 %}d{% endif %}{% if nope %}e{% endif %}", D),
    # for and loop.*
    ("loop_vars", "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", D),
    ("loop_prev_next", "{% for x in l %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}", D),
    ("loop_cycle", "{% for x in l %}{{ loop.cycle('odd', 'even') }}{% endfor %}", D),
    ("loop_else", "{% for x in [] %}x{% else %}empty{% endfor %}{% for x in nope %}y{% else %}none{% endfor %}", {}),
    ("loop_filter", "{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.last }}{% endfor %}", {}),
    ("loop_dict", "{% for k in d %}{{ k }}{% endfor %} {% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {% for k, v in d|items %}{{ k }}{% endfor %}", D),
    ("loop_string", "{% for c in 'héj' %}[{{ c }}]{% endfor %}", {}),
    ("loop_scope", "{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}", {}),
    ("loop_nested", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}{% endfor %}", {}),
    ("break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("reversed_messages", "{% for m in messages[::-1] %}{{ loop.index0 }}{{ m.role[0] }}{% endfor %}", V),
    ("range", "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }}", {}),
    # set, namespace, macro
    ("set", "{% set a = 'x' %}{% set b = a ~ 'y' %}{{ b }}{% if true %}{% set c = 3 %}{% endif %}{{ c }}", {}),
    ("set_block", "{% set blk %}inner {{ 1 + 1 }}{% endset %}[{{ blk }}]", {}),
    ("namespace", "{% set ns = namespace(found=false, n=0) %}{% for x in l %}{% if x > 1 %}{% set ns.found = true %}{% set ns.n = ns.n + x %}{% endif %}{% endfor %}{{ ns.found }} {{ ns.n }}", D),
    ("namespace_new_attr", "{% set ns = namespace() %}{% set ns.index = 0 %}{% for m in messages %}{% set ns.index = ns.index + 1 %}{% endfor %}{{ ns.index }}", V),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(punct='.', name='c') }}", {}),
    ("macro_outer", "{% set who = 'w' %}{% macro m() %}{{ who }}{% endmacro %}{{ m() }}", {}),
    ("macro_nested_call", "{% macro render(m) %}{{ m.role|upper }}: {{ m.content }}\n{% endmacro %}{% for m in messages %}{{ render(m) }}{% endfor %}", V),
    ("generation_block", "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% endif %}{% endfor %}", V),
    # tests
    ("tests_types", "{{ n is number }}{{ f is float }}{{ n is integer }}{{ s is string }}{{ d is mapping }}{{ l is iterable }}{{ s is iterable }}{{ n is iterable }}{{ l is sequence }}{{ none is none }}{{ nope is defined }}{{ nope is undefined }}{{ n is not none }}", D),
    ("tests_bool", "{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}{{ true is boolean }}{{ 1 is boolean }}{{ true is number }}", {}),
    ("tests_args", "{{ 6 is divisibleby 3 }}{{ 7 is divisibleby(3) }}{{ 3 is odd }}{{ 4 is even }}{{ 'a' is eq 'a' }}{{ 2 is gt 1 }}{{ 1 is in [1, 2] }}{{ none is sameas none }}{{ raise_exception is callable }}", {}),
    # filters
    ("trim", "[{{ s|trim }}][{{ '\u00a0\u3000x\u2003 '|trim }}][{{ 'xxhixx'|trim('x') }}]", D),
    ("tojson", "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ l|tojson(separators=(',', ':')) }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}|{{ 'é\"\\\\\x01'|tojson }}|{{ [1.0, 0.5, 1e20]|tojson }}", D),
    ("tojson_indent4", "{{ {'name': 'f', 'parameters': {'type': 'object', 'properties': {}, 'required': []}}|tojson(indent=4) }}", {}),
    ("length", "{{ l|length }} {{ s|length }} {{ d|length }} {{ 'héllo'|length }} {{ nope|length }} {{ l|count }}", D),
    ("default", "{{ nope|default('dflt') }} {{ e|default('x') }} {{ e|default('x', true) }} {{ n|d(0) }} [{{ nope|default }}]", D),
    ("case", "{{ 'Hello World'|upper }} {{ 'Hello'|lower }} {{ 'hello big-world x1y'|title }} {{ 'hELLO'|capitalize }}", {}),
    ("join", "{{ l|join(', ') }} {{ ['a', 'b']|join }} {{ messages|join('/', attribute='role') }}", {**D, **V}),
    ("first_last", "{{ l|first }} {{ l|last }} {{ 'abc'|first }} {{ messages|last|tojson }}", {**D, **V}),
    ("list_string_int", "{{ 'ab'|list }} {{ n|string ~ 'x' }} {{ '42'|int + 1 }} {{ 'x'|int }} {{ 3.9|int }} {{ n|float }}", D),
    ("replace", "{{ 'a-b-c'|replace('-', '+') }} {{ 'aaa'|replace('a', 'b', 2) }}", {}),
    ("items_filter", "{% for k, v in {'x': 1, 'y': [2]}|items %}{{ k }}:{{ v }} {% endfor %}", {}),
    ("select_reject", "{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ [0, 1, '', 'a']|select|list }} {{ ['a', 'code_interpreter', 'b']|reject('equalto', 'code_interpreter')|join(', ') }}", {}),
    ("selectattr", "{{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|rejectattr('role', 'equalto', 'user')|map(attribute='content')|join('|') }} {{ messages|selectattr('nope', 'undefined')|list|length }}", V),
    ("map", "{{ ['a', 'b']|map('upper')|join }} {{ messages|map(attribute='role')|list }} {{ [1, 2]|map('string')|join('+') }}", V),
    ("reverse_safe", "{{ l|reverse|list }} {{ 'x'|safe }}", D),
    ("filter_chain", "{{ messages|map(attribute='content')|map('trim')|map('lower')|join(' ')|replace('!', '') }}", V),
    # str and dict methods
    ("strip_methods", "[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}][{{ '\n\nx\n'.strip('\n') }}][{{ 'xyhixy'.strip('xy') }}][{{ 'ab'.lstrip('a') }}]", D),
    ("starts_ends", "{{ s.strip().startswith('Hello') }} {{ s.endswith('  ') }} {{ 'abc'.startswith(('x', 'a')) }} {{ 'abc'.endswith('bc') }}", D),
    ("split", "{{ 'a,b,,c'.split(',') }} {{ '  a  b\tc\n'.split() }} {{ 'a b c'.split(' ', 1) }} {{ '<think>x</think>y'.split('</think>')[-1] }}", {}),
    ("str_methods", "{{ 'aXa'.replace('a', 'b') }} {{ 'abc'.upper() }} {{ 'ABC'.lower() }} {{ 'hello world'.title() }}", {}),
    ("dict_methods", "{{ d.get('b') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }} {{ d.keys()|list }} {{ {'a': 1}.items()|list }} {{ {'a': 1}.values()|list }}", D),
    ("dict_literal_json", "{{ {'role': 'user', 'n': [1, {'k': none}]}|tojson }}", {}),
    # globals
    ("strftime_now", "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %H:%M:%S') }} {{ strftime_now('%A %B') }}", {}),
    ("raise_exception", "{% if messages|length > 2 %}{{ raise_exception('Too many messages: ' ~ messages|length) }}{% endif %}", V),
    ("dict_global", "{{ dict(a=1, b='x')|tojson }}", {}),
    ("tools_none", "{% if tools %}t{% endif %}{% if tools is none %}n{% endif %}{% if tools is defined %}d{% endif %}{% if documents is defined %}D{% endif %}", {"tools": None}),
    ("add_generation_prompt", "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}", V),
    # errors jinja2 raises too
    ("error_undefined_attr", "{{ nope.attr }}", {}),
    ("error_undefined_add", "{{ nope + 1 }}", {}),
]


def corpus():
    out = []
    for name, source, variables in CORPUS:
        case = {"name": name, "template": source, "variables": variables}
        case.update(render(source, variables))
        out.append(case)
    return out


def dump(path, cases):
    with open(os.path.join(root, "tests", "data", path), "w") as f:
        json.dump({"source": "jinja2 %s in transformers' chat template environment (tools/gen_chat_golden.py)" % jinja2.__version__,
                   "now": NOW.strftime("%Y-%m-%d %H:%M:%S"), "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")


dump("chat_golden.json", chat_goldens())
dump("jinja_golden.json", corpus())
