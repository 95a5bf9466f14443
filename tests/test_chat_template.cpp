// Chat templates (glass/chat/): the Jinja engine construct by construct — whitespace control,
// Python-style printing, operators, lookups, tests, filters, methods, loops, scoping, macros —
// then errors (each names its line), refusals (raise_exception), the sandbox, and the limits.
// Every expected string below was produced by python3-jinja2 3.1.2 with Hugging Face's settings
// (tests/chat/render_reference.py); tests/chat/check_templates.py compares whole real templates.
#include <doctest/doctest.h>

#include <string>

#include "glass/chat/chat_template.hpp"

namespace test_chat_template {  // this file's own names (tests are built in unity batches)

namespace {

using glass::chat::ChatInputs;
using glass::chat::ChatTemplate;
using glass::chat::TemplateError;
using glass::chat::TemplateRaised;

/// Renders `source` with a fixed set of variables and a fixed clock (2026-02-10 13:07 UTC).
std::string render(const std::string& source) {
    const auto variables = nlohmann::ordered_json::parse(R"({
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        "d": {"a": 1, "b": null}, "l": [3, 1, 2], "s": " Hello World "})");
    return ChatTemplate(source).render_variables(variables, 1767225600 + 86400 * 40 + 3600 * 13 + 60 * 7);
}

/// The TemplateError message a template gives (fails the test when it renders).
std::string error_of(const std::string& source) {
    try {
        render(source);
    } catch (const TemplateError& e) {
        return e.what();
    }
    FAIL("expected a TemplateError from: " << source);
    return "";
}

}  // namespace

TEST_CASE("whitespace control: {%- -%}, trim_blocks, lstrip_blocks, {%+ +%}, comments, raw") {
    CHECK(render(R"J(a  {{- 'b' -}}  c)J") ==
          R"J(abc)J");
    CHECK(render(R"J(a
  {%- if true %}
b
{%- endif %}
c)J") ==
          R"J(abc)J");
    CHECK(render(R"J(  {% if true %}
    x
  {% endif %}
y)J") ==
          R"J(    x
y)J");
    CHECK(render(R"J(  {%+ if true %}x{% endif %})J") ==
          R"J(  x)J");
    CHECK(render(R"J(  {{ 'v' }}
  {# c #}
z)J") ==
          R"J(  v
z)J");
    CHECK(render(R"J(a {# comment #}
b)J") ==
          R"J(a b)J");
    CHECK(render(R"J({% if true %}x{% endif +%}
y)J") ==
          R"J(x
y)J");
    CHECK(render(R"J(line
	 {% set x = 1 %}
next {{ x }})J") ==
          R"J(line
next 1)J");
    CHECK(render(R"J(a {% if true %} b {% endif %} c)J") ==
          R"J(a  b  c)J");
    CHECK(render("x\r\ny\rz\n") ==
          R"J(x
y
z)J");
    CHECK(render(R"J({% raw %}{{ not }}{% endraw %})J") ==
          R"J({{ not }})J");
    CHECK(render(R"J(  {%- raw %} {{x}} {% endraw -%}  !)J") ==
          R"J( {{x}} !)J");
    CHECK(render(R"J({{ 'a' }}
{{ 'b' }}
)J") ==
          R"J(a
b)J");
    CHECK(render(R"J({%- for i in [1,2] -%}
  {{ i }}
{%- endfor %}
)J") ==
          R"J(12)J");
}

TEST_CASE("literals and printing: Python's str() of floats, None, True, lists, dicts, tuples") {
    CHECK(render(R"J({{ 1.0 }} {{ 0.1 }} {{ 1e-5 }} {{ 1e16 }} {{ 123456789.5 }} {{ 3.0 * 1e300 * 1e300 }} {{ -0.0 }} {{ 2.5e-4 }})J") ==
          R"J(1.0 0.1 1e-05 1e+16 123456789.5 inf -0.0 0.00025)J");
    CHECK(render(R"J({{ none }} {{ None }} {{ true }} {{ False }} {{ [1, 'a', none, true, 1.5] }} {{ (1,) }} {{ (1, 'b') }})J") ==
          R"J(None None True False [1, 'a', None, True, 1.5] (1,) (1, 'b'))J");
    CHECK(render(R"J({{ {'a': none, 'b': true, 'c': [1, {'d': 'x'}]} }})J") ==
          R"J({'a': None, 'b': True, 'c': [1, {'d': 'x'}]})J");
    CHECK(render(R"J({{ ["it's", 'say "hi"', 'both \' "', 'tab\tnl\n', 'é☕'] }})J") ==
          R"J(["it's", 'say "hi"', 'both \' "', 'tab\tnl\n', 'é☕'])J");
    CHECK(render(R"J({{ d }} {{ l }} {{ d.items() }} {{ d.keys() }} {{ d.values() }})J") ==
          R"J({'a': 1, 'b': None} [3, 1, 2] dict_items([('a', 1), ('b', None)]) dict_keys(['a', 'b']) dict_values([1, None]))J");
    CHECK(render(R"J({{ 'a' 'b' }} {{ "\x41\u00e9\101" }} {{ 'q\w' }})J") ==
          R"J(ab AéA q\w)J");
    CHECK(render(R"J({{ 1_000 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }})J") ==
          R"J(1000 3 -4 -2 3.5 2.0 1024 0.5 64 4)J");
    CHECK(render(R"J({{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ 1 + 1.5 }} {{ true + 1 }} {{ 'a' ~ 1 ~ none ~ u }})J") ==
          R"J(7 9 ababab [1, 1] 2.5 2 a1None)J");
    CHECK(render(R"J({{ 1, 2 }})J") ==
          R"J((1, 2))J");
}

TEST_CASE("comparisons, in, and/or/not (returning operands), conditional expressions, if/elif/else") {
    CHECK(render(R"J({{ 1 == 1.0 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 != 2 }} {{ u == u }} {{ none == none }})J") ==
          R"J(True True False True True True True True)J");
    CHECK(render(R"J({{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'a' in d }} {{ 'z' not in d }} {{ 'x' in u }} {{ not 'x' in 'x' }})J") ==
          R"J(True True True True False False)J");
    CHECK(render(R"J({{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' and 'z' }} {{ none or [] }} {{ not [] }} {{ u or 'fallback' }})J") ==
          R"J(x y  [] True fallback)J");
    CHECK(render(R"J({{ 'yes' if l else 'no' }} [{{ 'x' if false }}] {{ 1 if false else 2 if false else 3 }})J") ==
          R"J(yes [] 3)J");
    CHECK(render(R"J({% if [] %}a{% elif 0 %}b{% elif 'x' %}c{% else %}d{% endif %})J") ==
          R"J(c)J");
}

TEST_CASE("attribute and subscript lookup, negative indices, slices") {
    CHECK(render(R"J({{ d.a }} {{ d['a'] }} {{ d.b }} [{{ d.zz }}] {{ l[0] }} {{ l[-1] }} [{{ l[10] }}] {{ l.0 }} {{ s[1] }})J") ==
          R"J(1 1 None [] 3 2 [] 3 H)J");
    CHECK(render(R"J({{ messages[0].role }} {{ messages[0]['content'] }} {{ messages[-1].role }})J") ==
          R"J(user hi assistant)J");
    CHECK(render(R"J({{ l[::-1] }} {{ l[1:] }} {{ l[:-1] }} {{ l[::2] }} {{ 'héllo'[1:3] }} {{ 'abc'[::-1] }} {{ l[5:] }} {{ 'abcdef'[-2:] }} {{ l[-10:2] }})J") ==
          R"J([2, 1, 3] [1, 2] [3, 1] [3, 2] él cba [] ef [3, 1])J");
    CHECK(render(R"J({{ d['items'] is callable }} {{ d.get('a') }} {{ d.get('q', 7) }} {{ d.get('q') }})J") ==
          R"J(True 1 7 None)J");
}

TEST_CASE("tests: is defined / none / string / number / mapping / iterable / equalto / odd / ...") {
    CHECK(render(R"J({{ u is defined }} {{ u is undefined }} {{ none is none }} {{ 's' is string }} {{ 1 is number }} {{ true is number }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }} {{ true is boolean }})J") ==
          R"J(False True True True True True True False True True)J");
    CHECK(render(R"J({{ d is mapping }} {{ l is iterable }} {{ 's' is iterable }} {{ u is iterable }} {{ 1 is iterable }} {{ l is sequence }} {{ d is sequence }} {{ range is callable }})J") ==
          R"J(True True True True False True True True)J");
    CHECK(render(R"J({{ true is true }} {{ 1 is true }} {{ false is false }} {{ 2 is equalto 2 }} {{ 2 is eq 3 }} {{ 2 is ne 3 }} {{ 2 is lt 3 }} {{ 2 is gt 3 }} {{ 2 is le 2 }} {{ 2 is ge 3 }})J") ==
          R"J(True False True True False True True False True False)J");
    CHECK(render(R"J({{ 3 is odd }} {{ 3 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 2 is in [1, 2] }} {{ 2 is not in [1] }} {{ none is sameas none }})J") ==
          R"J(True False True False True True True True True)J");
    CHECK(render(R"J({{ l | select('odd') | list }} {{ l | reject('odd') | list }} {{ l | select | list }} {{ [0, 1, ''] | select | list }})J") ==
          R"J([3, 1] [2] [3, 1, 2] [1])J");
}

TEST_CASE("filters") {
    CHECK(render(R"J([{{ s | trim }}] [{{ 'xxhixx' | trim('x') }}] {{ s | length }} {{ 'héllo' | length }} {{ d | count }} {{ u | length }})J") ==
          R"J([Hello World] [hi] 13 5 2 0)J");
    CHECK(render(R"J({{ d | tojson }} {{ l | tojson }} {{ 'é"\n<' | tojson }} {{ none | tojson }} {{ 1.5 | tojson }})J") ==
          R"J({"a": 1, "b": null} [3, 1, 2] "é\"\n<" null 1.5)J");
    CHECK(render(R"J({{ {'a': [1, 2], 'b': {}} | tojson(indent=2) }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}|{{ {'a': 1} | tojson(separators=(',', ':')) }}|{{ [] | tojson(indent=4) }})J") ==
          R"J({
  "a": [
    1,
    2
  ],
  "b": {}
}|{"a": 2, "b": 1}|{"a":1}|[])J");
    CHECK(render(R"J({{ d | items | list }} {% for k, v in d | items %}{{ k }}={{ v }};{% endfor %})J") ==
          R"J([('a', 1), ('b', None)] a=1;b=None;)J");
    CHECK(render(R"J({{ l | join(', ') }} {{ l | join }} {{ messages | join(',', attribute='role') }} {{ 'abc' | join('-') }})J") ==
          R"J(3, 1, 2 312 user,assistant a-b-c)J");
    CHECK(render(R"J({{ messages | map(attribute='role') | list }} {{ ['a', 'b'] | map('upper') | list }} {{ messages | map(attribute='nope', default='-') | list }} {{ ['a b'] | map('replace', ' ', '_') | list }})J") ==
          R"J(['user', 'assistant'] ['A', 'B'] ['-', '-'] ['a_b'])J");
    CHECK(render(R"J({{ messages | selectattr('role', 'equalto', 'user') | list | length }} {{ messages | rejectattr('role', 'eq', 'user') | map(attribute='content') | first }} {{ messages | selectattr('content') | list | length }})J") ==
          R"J(1 hello 2)J");
    CHECK(render(R"J({{ l | first }} {{ l | last }} {{ 'abc' | first }} [{{ [] | first }}] {{ d | first }})J") ==
          R"J(3 2 a [] a)J");
    CHECK(render(R"J({{ 'Hello World' | lower }} {{ 'hello' | upper }} {{ 'hello wORLD-foo(bar' | title }} {{ 'hELLO world' | capitalize }} {{ 'straße' | upper }})J") ==
          R"J(hello world HELLO Hello World-Foo(Bar Hello world STRASSE)J");
    CHECK(render(R"J({{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ 'ab' | replace('', '-') }})J") ==
          R"J(bbb bba -a-b-)J");
    CHECK(render(R"J({{ u | default('dflt') }} {{ '' | default('x') }} {{ '' | default('x', true) }} {{ none | d('y') }} {{ none | d('y', boolean=true) }})J") ==
          R"J(dflt  x None y)J");
    CHECK(render(R"J({{ 'ab' | list }} {{ d | list }} {{ u | list }} {{ 12 | string }} {{ none | string }} {{ [1] | string }})J") ==
          R"J(['a', 'b'] ['a', 'b'] [] 12 None [1])J");
    CHECK(render(R"J({{ '42' | int }} {{ '3.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ none | int }} {{ ' 1_0 ' | int }} {{ '1e3' | int }} {{ true | int }})J") ==
          R"J(42 3 0 7 3 0 10 1000 1)J");
    CHECK(render(R"J({{ '2.5' | float }} {{ 'x' | float }} {{ 3 | float }} {{ '1e-3' | float }} {{ 'inf' | float }})J") ==
          R"J(2.5 0.0 3.0 0.001 inf)J");
    CHECK(render(R"J({{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 2.1 | round(0, 'ceil') }} {{ 2.9 | round(method='floor') }} {{ 3 | round }} {{ 1.25 | round(1) }})J") ==
          R"J(2.0 4.0 2.67 3.0 2.0 3 1.2)J");
    CHECK(render(R"J({{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A', 'c'] | sort(case_sensitive=true) }} {{ l | sort(reverse=true) }} {{ messages | sort(attribute='role') | map(attribute='role') | list }})J") ==
          R"J([1, 2, 3] ['A', 'b', 'c'] ['A', 'b', 'c'] [3, 2, 1] ['assistant', 'user'])J");
    CHECK(render(R"J({{ [1, 2, 1, 3] | unique | list }} {{ ['a', 'A', 'b'] | unique | list }} {{ d | dictsort }} {{ {'b': 1, 'a': 2} | dictsort(by='value', reverse=true) }})J") ==
          R"J([1, 2, 3] ['a', 'b'] [('a', 1), ('b', None)] [('a', 2), ('b', 1)])J");
    CHECK(render(R"J([{{ 'a
b

c' | indent }}] [{{ 'a
b' | indent(2, first=true) }}] [{{ 'a

b' | indent(width='> ', blank=true) }}])J") ==
          R"J([a
    b

    c] [  a
  b] [a
> 
> b])J");
    CHECK(render(R"J({{ '<a href="x">&\'' | e }} {{ '<b>' | escape }} {{ '<b>' | safe }} {{ ('<i>' | safe) + '<b>' }} {{ 5 | e }})J") ==
          R"J(&lt;a href=&#34;x&#34;&gt;&amp;&#39; &lt;b&gt; <b> <i>&lt;b&gt; 5)J");
    CHECK(render(R"J({{ -3 | abs }} {{ -2.5 | abs }} {{ [3, 1, 4] | max }} {{ [3, 1, 4] | min }} {{ ['b', 'A'] | max }} {{ [1, 2, 3] | sum }} {{ [1.5, 2] | sum(start=10) }} {{ messages | map(attribute='content') | map('length') | sum }})J") ==
          R"J(3 2.5 4 1 b 6 13.5 7)J");
    CHECK(render(R"J({{ 'abc' | reverse }} {{ l | reverse | list }} {{ 'one two  three' | wordcount }} {{ [] | max }})J") ==
          R"J(cba [2, 1, 3] 3 )J");
    CHECK(render(R"J({% filter upper %}abc {{ 'd' }}{% endfilter %} {% set b | trim %}  padded  {% endset %}[{{ b }}])J") ==
          R"J(ABC D [padded])J");
}

TEST_CASE("str, dict and list methods") {
    CHECK(render("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ 'a\nb\r\nc'.splitlines() }}") ==
          R"J(['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] ['a,b', 'c'] ['a', 'b', 'c'])J");
    CHECK(render(R"J([{{ '  x  '.strip() }}] [{{ 'xxaxx'.lstrip('x') }}] [{{ 'xxaxx'.rstrip('x') }}] {{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'hello'.startswith('hello!') }})J") ==
          R"J([x] [axx] [xxa] True True False)J");
    CHECK(render(R"J({{ 'a-b-c'.replace('-', '+') }} {{ 'a-b-c'.replace('-', '+', 1) }} {{ 'Hello'.upper() }} {{ 'Hello'.lower() }} {{ 'hello world'.title() }} {{ "they're bill's".title() }} {{ 'hELLO'.capitalize() }})J") ==
          R"J(a+b+c a+b-c HELLO hello Hello World They'Re Bill'S Hello)J");
    CHECK(render(R"J({{ 'héllo'.find('l') }} {{ 'hello'.find('z') }} {{ 'hello'.rfind('l') }} {{ 'hello'.count('l') }} {{ 'hello'.index('e') }})J") ==
          R"J(2 -1 3 2 1)J");
    CHECK(render(R"J({{ '{} and {}'.format('a', 1) }} {{ '{1}{0}'.format('x', 'y') }} {{ '{name}!'.format(name='z') }} {{ '{{}}'.format() }} {{ '-'.join(['a', 'b']) }})J") ==
          R"J(a and 1 yx z! {} a-b)J");
    CHECK(render(R"J({{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ ' 	'.isspace() }} {{ 'a1'.isalnum() }} {{ 'abc'.islower() }} {{ 'ABC'.isupper() }} {{ 'prefix-x'.removeprefix('prefix-') }} {{ 'a=b=c'.partition('=') }})J") ==
          R"J(True True True True True True x ('a', '=', 'b=c'))J");
    CHECK(render(R"J({% for k, v in d.items() %}{{ k }}:{{ v }} {% endfor %}{{ d.keys() | list }} {{ d.values() | list }} {{ l.index(1) }} {{ l.count(3) }})J") ==
          R"J(a:1 b:None ['a', 'b'] [1, None] 1 1)J");
}

TEST_CASE("for loops: the loop object, else, filter if, break/continue, unpacking, range") {
    CHECK(render(R"J({% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }} {% endfor %})J") ==
          R"J(1032TrueFalse3 2121FalseFalse3 3210FalseTrue3 )J");
    CHECK(render(R"J({% for x in l %}{{ loop.previtem }}-{{ loop.nextitem }}|{{ loop.cycle('a', 'b') }} {% endfor %})J") ==
          R"J(-1|a 3-2|b 1-|a )J");
    CHECK(render(R"J({% for x in [] %}no{% else %}empty{% endfor %} {% for x in l if x > 1 %}{{ x }}{{ loop.length }} {% endfor %})J") ==
          R"J(empty 32 22 )J");
    CHECK(render(R"J({% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %})J") ==
          R"J(3)J");
    CHECK(render(R"J({% for a, b in [(1, 2), (3, 4)] %}{{ a + b }} {% endfor %}{% for c in 'ab' %}{{ c }}{% endfor %}{% for k in d %}{{ k }}{% endfor %}{% for x in u %}never{% endfor %})J") ==
          R"J(3 7 abab)J");
    CHECK(render(R"J({% for x in [1, 2] %}{% for y in 'ab' %}{{ loop.index }}{{ y }}{% endfor %}{{ loop.index }} {% endfor %})J") ==
          R"J(1a2b1 1a2b2 )J");
    CHECK(render(R"J({{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(3, 0, -1) | list }})J") ==
          R"J([0, 1, 2] [1, 3, 5] [3, 2, 1])J");
}

TEST_CASE("scoping: a set inside a for loop does not leak; namespace; block set") {
    CHECK(render(R"J({% set x = 1 %}{% for i in [1, 2] %}{% set x = i * 10 %}{{ x }} {% endfor %}{{ x }})J") ==
          R"J(10 20 1)J");
    CHECK(render(R"J({% set x = 'outer' %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }} {% endfor %}{{ x }})J") ==
          R"J(outer1 outer2 outer)J");
    CHECK(render(R"J({% set ns = namespace(total=0, seen=[]) %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}{% set ns.seen = ns.seen + [i] %}{% endfor %}{{ ns.total }} {{ ns.seen }})J") ==
          R"J(6 [1, 2, 3])J");
    CHECK(render(R"J({% if true %}{% set y = 5 %}{% endif %}{{ y }} {% set a, b = 1, 2 %}{{ a }}{{ b }} {% set (c, e) = ['x', 'y'] %}{{ c }}{{ e }})J") ==
          R"J(5 12 xy)J");
    CHECK(render(R"J({% set ns = namespace() %}{% set ns.a = 1 %}{{ ns.a }} [{{ ns.missing }}] {{ ns }})J") ==
          R"J(1 [] <Namespace {'a': 1}>)J");
    CHECK(render(R"J({% set t %}block {{ 1 + 1 }}{% endset %}[{{ t }}])J") ==
          R"J([block 2])J");
}

TEST_CASE("macros: defaults, keyword args, caller, recursion, varargs/kwargs; globals") {
    CHECK(render(R"J({% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }} [{{ greet() }}])J") ==
          R"J(Hi A! Hi B? Hi C. [Hi !])J");
    CHECK(render(R"J({% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 }}{% endcall %})J") ==
          R"J(<b>bold 1</b>)J");
    CHECK(render(R"J({% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) each([1, 2]) %}[{{ x }}]{% endcall %})J") ==
          R"J([1][2])J");
    CHECK(render(R"J({% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ fact(5) }})J") ==
          R"J(120)J");
    CHECK(render(R"J({% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }})J") ==
          R"J((1, 2){'k': 3})J");
    CHECK(render(R"J({% set g = 'global' %}{% macro show() %}{{ g }}{% set g = 'local' %}{{ g }}{% endmacro %}{{ show() }} {{ g }})J") ==
          R"J(globallocal global)J");
    CHECK(render(R"J({{ dict(a=1, b='x') }} {{ namespace(a=1).a }} {{ strftime_now('%Y-%m-%d %H:%M %A %B') }})J") ==
          R"J({'a': 1, 'b': 'x'} 1 2026-02-10 13:07 Tuesday February)J");
}

TEST_CASE("Python's repr of floats, as {{ x }} prints them") {
    using glass::chat::jinja::python_float_repr;
    CHECK(python_float_repr(1.0) == "1.0");
    CHECK(python_float_repr(0.1) == "0.1");
    CHECK(python_float_repr(1e-05) == "1e-05");
    CHECK(python_float_repr(0.0001) == "0.0001");
    CHECK(python_float_repr(1e16) == "1e+16");
    CHECK(python_float_repr(1e15) == "1000000000000000.0");
    CHECK(python_float_repr(1.5e300) == "1.5e+300");
    CHECK(python_float_repr(-2.5) == "-2.5");
    CHECK(python_float_repr(1.0 / 3) == "0.3333333333333333");
    CHECK(python_float_repr(1e300 * 1e300) == "inf");
}

TEST_CASE("render() passes Hugging Face's variables; tools stays undefined when not given") {
    const ChatTemplate t(
        "{{ bos_token }}{{ messages[0].content }}|{{ tools is defined }}|{{ add_generation_prompt }}|{{ enable_thinking }}{{ eos_token }}");
    ChatInputs in{.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])"),
                  .bos_token = "<s>", .eos_token = "</s>", .extra = {{"enable_thinking", false}}};
    CHECK(t.render(in) == "<s>hi|False|True|False</s>");
    in.tools = nlohmann::ordered_json::parse(R"([{"function": {"name": "f"}}])");
    in.add_generation_prompt = false;
    CHECK(t.render(in) == "<s>hi|True|False|False</s>");
    CHECK(ChatTemplate("{{ tools | length }} {{ tools[0].function.name }}").render(in) == "1 f");
    CHECK(t.source().substr(0, 14) == "{{ bos_token }");
}

TEST_CASE("strftime_now reads the given clock, in UTC") {
    const ChatTemplate t("{{ strftime_now('%d %b %Y %Z') }}");
    CHECK(t.render({.now_unix_seconds = 0}) == "01 Jan 1970 UTC");
    CHECK(render("{{ strftime_now('%Y-%m-%d') }}") == "2026-02-10");
}

TEST_CASE("raise_exception refuses the conversation with exactly its message") {
    try {
        render("before {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}");
        FAIL("expected TemplateRaised");
    } catch (const TemplateRaised& e) {
        CHECK(std::string(e.what()) == "Conversation roles must alternate user/assistant/user/assistant/...");
    }
    CHECK_THROWS_AS(render("{% if true %}{{ raise_exception('no') }}{% endif %}"), TemplateRaised);
}

TEST_CASE("where Jinja2 raises, glass raises a TemplateError naming the problem and its line") {
    CHECK(error_of("{{ x.y }}") == "chat template line 1: 'x' is undefined");
    CHECK(error_of("ok\n\n{{ d.zz.y }}") == "chat template line 3: 'dict object' has no attribute 'zz'");
    CHECK(error_of("{{ 1 + 'a' }}") == "chat template line 1: unsupported operand type(s) for +: 'int' and 'str'");
    CHECK(error_of("\n{{ none + 'a' }}") == "chat template line 2: unsupported operand type(s) for +: 'NoneType' and 'str'");
    CHECK(error_of("{{ u + 1 }}") == "chat template line 1: 'u' is undefined");
    CHECK(error_of("{{ u() }}") == "chat template line 1: 'u' is undefined");
    CHECK(error_of("{{ u < 1 }}") == "chat template line 1: 'u' is undefined");
    CHECK(error_of("{{ -u }}") == "chat template line 1: 'u' is undefined");
    CHECK(error_of("{{ u | int }}") == "chat template line 1: 'u' is undefined");
    CHECK(error_of("{{ u | tojson }}") == "chat template line 1: Object of type Undefined is not JSON serializable");
    CHECK(error_of("{% for x in 1 %}{% endfor %}") == "chat template line 1: 'int' object is not iterable");
    CHECK(error_of("{{ 1 / 0 }}") == "chat template line 1: division by zero");
    CHECK(error_of("{{ 'a' < 1 }}") == "chat template line 1: '<' not supported between instances of 'str' and 'int'");
    CHECK(error_of("{% set l.x = 1 %}") == "chat template line 1: cannot assign attribute on non-namespace object");
    CHECK(error_of("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}") == "chat template line 1: macro 'm' takes not more than 1 argument(s)");
    CHECK(error_of("{% macro m(a) %}{% endmacro %}{{ m(b=2) }}") == "chat template line 1: macro 'm' takes no keyword argument 'b'");
    CHECK(error_of("{{ (1, 2) + [3] }}") == "chat template line 1: unsupported operand type(s) for +: 'tuple' and 'list'");
    CHECK(error_of("{% for a, b in [1] %}{% endfor %}") == "chat template line 1: 'int' object is not iterable");
    CHECK(error_of("{{ 2 ** 64 }}") == "chat template line 1: integer overflow (Python would make a big integer)");
}

TEST_CASE("syntax errors name their line") {
    CHECK_THROWS_WITH_AS(ChatTemplate("a\n{% if %}{% endif %}"), "chat template line 2: expected an expression, got '%}'", TemplateError);
    CHECK_THROWS_WITH_AS(ChatTemplate("{{ 'abc' }"), "chat template line 1: unexpected '}'", TemplateError);
    CHECK_THROWS_WITH_AS(ChatTemplate("x\ny\n{% for x in l %}"), "chat template line 3: unexpected end of template, expected 'endfor'", TemplateError);
    CHECK_THROWS_WITH_AS(ChatTemplate("{# open"), "chat template line 1: missing end of comment tag", TemplateError);
    CHECK_THROWS_WITH_AS(ChatTemplate("{{ 'open }}"), "chat template line 1: unterminated string", TemplateError);
    CHECK_THROWS_WITH_AS(ChatTemplate("{% break %}"), "chat template line 1: 'break' outside a loop", TemplateError);
    CHECK_THROWS_WITH_AS(ChatTemplate("x", "qwen3 template").render_variables({{"a", 1}}) + ChatTemplate("{{ q.r }}", "qwen3 template").render_variables({}),
                         "qwen3 template line 1: 'q' is undefined", TemplateError);
    try {
        ChatTemplate("\n\n\n{% include 'x' %}");
    } catch (const TemplateError& e) {
        CHECK(e.line() == 4);
        CHECK(e.message() == "unsupported tag 'include'");
    }
}

TEST_CASE("constructs glass does not implement are TemplateErrors naming them, never a different prompt") {
    CHECK_THROWS_WITH_AS(ChatTemplate("{% generation %}x{% endgeneration %}"), "chat template line 1: unsupported tag 'generation'", TemplateError);
    CHECK_THROWS_WITH_AS(ChatTemplate("{% extends 'base' %}"), "chat template line 1: unsupported tag 'extends'", TemplateError);
    CHECK_THROWS_WITH_AS(ChatTemplate("{% for x in l recursive %}{% endfor %}"), "chat template line 1: unsupported recursive for loop", TemplateError);
    CHECK(error_of("\n{{ 'x' | wordwrap }}") == "chat template line 2: unsupported filter 'wordwrap'");
    CHECK(error_of("{{ l | batch(1) | list }}") == "chat template line 1: unsupported filter 'batch'");
    CHECK(error_of("{{ 1 is nope }}") == "chat template line 1: unsupported test 'nope'");
    CHECK(error_of("{{ 'x'.zfill(3) }}") == "chat template line 1: unsupported string method 'zfill'");
    CHECK(error_of("{{ l.pop() }}") == "chat template line 1: unsupported list method 'pop'");
    CHECK(error_of("{{ '%s' % 1 }}") == "chat template line 1: unsupported: printf-style string formatting with %");
    CHECK(error_of("{{ l | map('upper') }}") == "chat template line 1: unsupported: printing a generator (add |list)");
    CHECK(error_of("{{ ('<b>' | safe).upper() }}") == "chat template line 1: unsupported: method 'upper' of a Markup string (from |safe or |escape)");
    CHECK(error_of("{{ lipsum() }}") == "chat template line 1: unsupported global function 'lipsum'");
}

TEST_CASE("the sandbox: methods that mutate are refused when called, as ImmutableSandboxedEnvironment does") {
    CHECK(error_of("{{ l.append(4) }}") == "chat template line 1: access to attribute 'append' of 'list' object is unsafe.");
    CHECK(error_of("{{ d.update({}) }}") == "chat template line 1: access to attribute 'update' of 'dict' object is unsafe.");
    CHECK(render("[{{ l.append }}] {{ l.append is defined }}") == "[] False");  // an undefined until used
}

TEST_CASE("undefined: prints empty, is false, iterates as nothing; a missing key is undefined") {
    CHECK(render("[{{ u }}] {{ u is defined }} {{ not u }} {% for x in u %}x{% endfor %}{{ u | length }} [{{ d.zz }}] [{{ l[9] }}]") == "[] False True 0 [] []");
    CHECK(render("{{ messages[0].nope is defined }} {{ none.x is defined }}") == "False False");
}

TEST_CASE("limits: recursion, loop iterations, output size, parse depth — a TemplateError, not a crash or a hang") {
    CHECK(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("macro calls nested deeper than 200 levels") != std::string::npos);
    CHECK(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}").find("loops ran over 1000000 iterations") !=
          std::string::npos);
    CHECK(error_of("{{ range(100001) | list }}").find("MAX_RANGE") != std::string::npos);
    CHECK(error_of("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(30) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
              .find("MiB") != std::string::npos);
    CHECK(error_of("{{ 'x' * 100000000 }}").find("MiB") != std::string::npos);
    CHECK_THROWS_WITH_AS(ChatTemplate("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}").render_variables({}),
                         "chat template line 1: template nested deeper than 256 levels", TemplateError);
    CHECK_THROWS_WITH_AS(ChatTemplate{"{{ " + std::string(2000, '[') + std::string(2000, ']') + " }}"},
                         "chat template line 1: template nested deeper than 256 levels", TemplateError);
    std::string deep_ifs;
    for (int i = 0; i < 300; ++i) deep_ifs += "{% if true %}";
    CHECK_THROWS_WITH_AS(ChatTemplate{deep_ifs}, "chat template line 1: template nested deeper than 256 levels", TemplateError);
    CHECK(error_of("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}")
              .find("value nested deeper than 500 levels") != std::string::npos);
}

}  // namespace test_chat_template
