// SPDX-License-Identifier: MIT
// Unit tests of the Jinja interpreter (src/chat/jinja*.c). Each render case is a small template,
// its variables as JSON, and the output jinja2 3.1 produced for it under transformers' settings
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, json.dumps tojson).
// Error cases check that the message names the line and the construct.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"
#include "check.h"

typedef struct render_case {
    const char *template;
    const char *vars; // JSON object
    const char *expected;
} render_case;

static const render_case CASES[] = {
    {"{{ 1.0 }} {{ 1e20 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1/3 }} {{ 10/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} {{ 2**10 }} {{ 2**-1 }}",
     "{}",
     "1.0 1e+20 0.0001 1e-05 0.3333333333333333 5.0 3 -4 2 1024 0.5"},
    {"{{ (1,2) }} {{ (1,) }} {{ {\"a\": [1, \"it's\"]} }} {{ none }} {{ true }}",
     "{}",
     "(1, 2) (1,) {'a': [1, \"it's\"]} None True"},
    {"a\n  {% if true %}\n  b\n  {% endif %}\n  c {# x #}\nd\n",
     "{}",
     "a\n  b\n  c d"},
    {"{{ x | default(\"d\") }} {{ \"\" | default(\"e\", true) }}",
     "{}",
     "d e"},
    {"{% for a in [] %}x{% else %}empty{% endfor %}",
     "{}",
     "empty"},
    {"{{ \"%s-%d\" % (\"a\", 3) }}",
     "{}",
     "a-3"},
    {"{% for i in [1,2,3] %}{% if loop.first %}{% set x = 5 %}{% endif %}[{{ x }}]{% endfor %}",
     "{}",
     "[5][][]"},
    {"{% set x = 1 %}{% for i in [1,2] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}",
     "{}",
     "12121"},
    {"{% macro m(a, b=\"z\") %}{{ a }}{{ b }}{{ y }}{% endmacro %}{% set y = 3 %}{{ m(1) }}{{ m(2, b=4) }}",
     "{}",
     "1z3243"},
    {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
     "{\"d\": {\"b\": 1, \"a\": [1, 2]}}",
     "b=1;a=[1, 2];"},
    {"{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.previtem }}{{ loop.nextitem }}|{% endfor %}",
     "{\"xs\": [\"a\", \"b\", \"c\"]}",
     "10TrueFalse33b|21FalseFalse32ac|32FalseTrue31b|"},
    {"{{ \"abc\"[::-1] }} {{ [1,2,3,4][1:3] }} {{ [1,2,3,4][-2:] }} {{ \"h\303\251llo\"[1:3] }} {{ xs[::2] }} {{ xs[5:1:-2] }}",
     "{\"xs\": [0, 1, 2, 3, 4, 5, 6, 7]}",
     "cba [2, 3] [3, 4] \303\251l [0, 2, 4, 6] [5, 3]"},
    {"{{ \"  hi  \".strip() }}|{{ \"xxhixx\".strip(\"x\") }}|{{ \"a,b,,c\".split(\",\") }}|{{ \" a  b \".split() }}|{{ \"a b c\".split(\" \", 1) }}|{{ \"a b c\".rsplit(\" \", 1) }}",
     "{}",
     "hi|hi|['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|['a b', 'c']"},
    {"{{ \"Hello World\".lower() }} {{ \"hello world\".upper() }} {{ \"hello world\".title() }} {{ \"hELLO\".capitalize() }} {{ \"abcabc\".find(\"c\") }} {{ \"abcabc\".count(\"bc\") }} {{ \"abc\".replace(\"b\", \"XX\") }}",
     "{}",
     "hello world HELLO WORLD Hello World Hello 2 2 aXXc"},
    {"{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ [] | tojson }}|{{ {} | tojson(indent=2) }}|{{ \"\303\251\\n\\\"\" | tojson }}",
     "{\"d\": {\"b\": 1, \"a\": [1, 2.5, null, true, \"x\"], \"c\": {}}}",
     "{\"b\": 1, \"a\": [1, 2.5, null, true, \"x\"], \"c\": {}}|{\n  \"b\": 1,\n  \"a\": [\n    1,\n    2.5,\n    null,\n    true,\n    \"x\"\n  ],\n  \"c\": {}\n}|[]|{}|\"\303\251\\n\\\"\""},
    {"{{ xs | length }} {{ xs | first }} {{ xs | last }} {{ xs | join(\", \") }} {{ xs | reverse | list }} {{ xs | sort }} {{ xs | unique | list }}",
     "{\"xs\": [3, 1, 2, 3]}",
     "4 3 3 3, 1, 2, 3 [3, 2, 1, 3] [1, 2, 3, 3] [3, 1, 2]"},
    {"{{ ms | map(attribute=\"role\") | join(\",\") }} {{ ms | selectattr(\"role\", \"equalto\", \"user\") | list | length }} {{ ms | rejectattr(\"role\", \"eq\", \"user\") | map(attribute=\"content\") | list }}",
     "{\"ms\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}",
     "user,assistant 1 ['b']"},
    {"{{ [1,2,3,4] | select(\"odd\") | list }} {{ [1,2,3,4] | reject(\"even\") | list }} {{ [\"a\", \"\", \"b\"] | select | list }}",
     "{}",
     "[1, 3] [1, 3] ['a', 'b']"},
    {"{{ d | items | list }} {{ d | dictsort }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.get(\"a\") }} {{ d.get(\"z\", 9) }} {{ d.get(\"z\") }}",
     "{\"d\": {\"b\": 2, \"A\": 1, \"a\": 3}}",
     "[('b', 2), ('A', 1), ('a', 3)] [('A', 1), ('a', 3), ('b', 2)] ['b', 'A', 'a'] [2, 1, 3] 3 9 None"},
    {"{{ \"  x \" | trim }}|{{ 3 | string }}|{{ \"42\" | int + 1 }}|{{ \"4.5\" | float }}|{{ \"x\" | int }}|{{ 4.7 | int }}|{{ \"hello\" | capitalize }}|{{ \"a<b>&'\\\"\" | e }}|{{ \"x\" | safe }}",
     "{}",
     "x|3|43|4.5|0|4|Hello|a&lt;b&gt;&amp;&#39;&#34;|x"},
    {"{% set ns = namespace(a=1, found=false) %}{% for i in range(3) %}{% set ns.a = ns.a + i %}{% if i == 1 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.a }} {{ ns.found }}",
     "{}",
     "4 True"},
    // A namespace that holds itself prints as Python does, and compares without endless recursion.
    {"{% set ns = namespace(x=0) %}{% for i in range(5) %}{% set ns.x = ns %}{% endfor %}{{ ns.x }}",
     "{}",
     "<Namespace {'x': <Namespace {...}>}>"},
    {"{% set ns = namespace(x=0) %}{% set ns.x = [ns, 1] %}{{ ns }} {{ ns.x == ns.x }} {{ [ns] == [ns] }}",
     "{}",
     "<Namespace {'x': [<Namespace {...}>, 1]}> True True"},
    // The same shared value compares equal at once (Python's identity shortcut); powers of -1, 0, 1.
    {"{% set ns = namespace(a=[1]) %}{% for i in range(60) %}{% set ns.a = [ns.a, ns.a] %}{% endfor %}{{ ns.a == ns.a }} {{ [ns.a] == [ns.a] }} {{ ns.a in [ns.a] }}",
     "{}",
     "True True True"},
    {"{{ (-1) ** 3 }} {{ (-1) ** 4 }} {{ 0 ** 0 }} {{ 0 ** 5 }} {{ 1 ** 99999999999 }} {{ (-1) ** 99999999999 }} {{ 2 ** 62 }}",
     "{}",
     "-1 1 1 0 1 -1 4611686018427387904"},
    // Escapes in repr() and tojson (written without printf: strings of control characters can be long).
    {"{{ ['a\\x01\\x7f\\'\"\\\\\\n\\tb', \"it's\"] }} {{ '\\x01\"\\\\x' | tojson }}",
     "{}",
     "['a\\x01\\x7f\\'\"\\\\\\n\\tb', \"it's\"] \"\\u0001\\\"\\\\x\""},
    {"{{ range(5) | list }} {{ range(1, 10, 3) | list }} {{ range(5, 0, -2) | list }}",
     "{}",
     "[0, 1, 2, 3, 4] [1, 4, 7] [5, 3, 1]"},
    {"{{ x is defined }} {{ y is undefined }} {{ none is none }} {{ \"a\" is string }} {{ 1 is number }} {{ d is mapping }} {{ xs is iterable }} {{ xs is sequence }} {{ true is true }} {{ false is false }} {{ 1 is not string }}",
     "{\"x\": 1, \"d\": {}, \"xs\": []}",
     "True True True True True True True True True True True"},
    {"{{ 1 if true else 2 }} {{ 1 if false else 2 }} [{{ 1 if false }}] {{ \"a\" in \"cat\" }} {{ 2 in [1,2] }} {{ \"k\" in d }} {{ 3 not in [1] }} {{ not true }} {{ true and 0 }} {{ 0 or \"x\" }}",
     "{\"d\": {\"k\": 1}}",
     "1 2 [] True True True True False 0 x"},
    {"{{ \"a\" ~ 1 ~ none ~ true }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 10 - 2 - 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ \"ab\" * 3 }} {{ [1] * 2 }} {{ [1] + [2] }}",
     "{}",
     "a1NoneTrue 7 9 5 64 4 ababab [1, 1] [1, 2]"},
    {"{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ \"a\" < \"b\" }} {{ 1 == 1.0 }} {{ true == 1 }} {{ [1,2] == [1,2] }} {{ none == none }} {{ 1 != 2 }}",
     "{}",
     "True False True True True True True True"},
    {"{%- for m in ms -%}\n  {{- m.role }}: {{ m.content -}}\n{%- endfor %}\nEND",
     "{\"ms\": [{\"role\": \"u\", \"content\": \"x\"}, {\"role\": \"a\", \"content\": \"y\"}]}",
     "u: xa: yEND"},
    {"  {%- if true %}\n   X  \n  {%+ if true %}Y{% endif +%}\n{% endif %}  Z",
     "{}",
     "   X  \n  Y\n  Z"},
    {"{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
     "{}",
     "0134"},
    {"{% for x in xs if x > 1 %}{{ x }}{{ loop.length }}{{ loop.last }} {% endfor %}",
     "{\"xs\": [1, 2, 3]}",
     "22False 32True "},
    {"{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set c %}blk{{ a }}{% endset %}[{{ c }}]{% filter upper %}hello {{ b }}{% endfilter %}",
     "{}",
     "12[blk1]HELLO 2"},
    {"{% raw %}{{ not }}{% endraw %} {# c #} x",
     "{}",
     "{{ not }}  x"},
    {"{{ x.y }}|{{ x.y is defined }}|{{ xs[10] }}|{{ \"abc\"[-1] }}|{{ d[\"k\"] }}|{{ d.k }}",
     "{\"x\": {\"a\": 1}, \"xs\": [], \"d\": {\"k\": \"v\"}}",
     "|False||c|v|v"},
    {"{{ \"hello {}!\".format(\"w\") }} {{ \"%s and %s\" | format(1, \"b\") }}",
     "{}",
     "hello w! 1 and b"},
    {"{% macro r(n) %}{% if n > 0 %}{{ n }}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(5) }}",
     "{}",
     "54321"},
    {"{{ 3.0 }} {{ 1e16 }} {{ 123456789.123 }} {{ 0.1 + 0.2 }} {{ -0.0 }} {{ 2.5e-7 }} {{ 1e15 }} {{ 100.0 / 3 }}",
     "{}",
     "3.0 1e+16 123456789.123 0.30000000000000004 -0.0 2.5e-07 1000000000000000.0 33.333333333333336"},
    {"{{ d | tojson }}",
     "{\"d\": {\"x\": 1e+100, \"y\": -0.5, \"z\": 12345678901234567, \"u\": \"\\u00e9\\u4f60\\ud83d\\ude00\\u0001\\u007f\"}}",
     "{\"x\": 1e+100, \"y\": -0.5, \"z\": 12345678901234567, \"u\": \"\303\251\344\275\240\360\237\230\200\\u0001\177\"}"},
    {"{{ \"abc\" | list }} {{ {\"a\":1} | list }} {{ \"a-b c(d\" | title }} {{ \"HeLLo\" | lower }} {{ [3,1,2] | max }} {{ [3,1,2] | min }} {{ [1,2,3] | sum }}",
     "{}",
     "['a', 'b', 'c'] ['a'] A-B C(D hello 3 1 6"},
    {"{{ [\"b\",\"A\",\"a\"] | sort }} {{ [\"b\",\"A\",\"a\"] | sort(case_sensitive=true) }} {{ ms | sort(attribute=\"n\", reverse=true) | map(attribute=\"n\") | list }}",
     "{\"ms\": [{\"n\": 1}, {\"n\": 3}, {\"n\": 2}]}",
     "['A', 'a', 'b'] ['A', 'a', 'b'] [3, 2, 1]"},
    {"{{ \"line1\\nline2\\n\\nline3\" | indent(2) }}|{{ \"a\\nb\" | indent(4, true) }}",
     "{}",
     "line1\n  line2\n\n  line3|    a\n    b"},
    {"{% if a %}A{% elif b %}B{% elif c %}C{% else %}D{% endif %}",
     "{\"c\": 1}",
     "C"},
    {"{{ msg.content[0].text if msg.content is not string else msg.content }}",
     "{\"msg\": {\"content\": [{\"type\": \"text\", \"text\": \"hi\"}]}}",
     "hi"},
    {"{%- set x = \"\\u00e9\\t\\x41\" %}{{ x }}",
     "{}",
     "\303\251\tA"},
    {"{{ [1,2,3][1] }}{{ xs.0 }}",
     "{\"xs\": [\"z\"]}",
     "2z"},
    {"{{ \"abc\".startswith((\"x\", \"a\")) }} {{ \"abc\".endswith(\"bc\") }} {{ \"a\\nb\".splitlines() }} {{ \"  x\".lstrip() }}|{{ \"x  \".rstrip() }}|",
     "{}",
     "True True ['a', 'b'] x|x|"},
    {"{{ loop }}",
     "{}",
     ""},
    {"{% for a in [1] %}{% for b in [2] %}{{ loop.index }}{{ a }}{{ b }}{% endfor %}{{ loop.length }}{% endfor %}",
     "{}",
     "1121"},
    {"{{ 5 is divisibleby 5 }} {{ 3 is odd }} {{ 4 is even }} {{ 3 is gt 2 }} {{ \"a\" is in \"abc\" }} {{ \"ABC\" is upper }}",
     "{}",
     "True True True True True True"},
    {"{{ undefined_var }}|{{ undefined_var | length }}|{% for x in undefined_var %}x{% endfor %}|{{ undefined_var is none }}",
     "{}",
     "|0||False"},
    {"x\n{% if true %}\nyes\n{% endif %}\nz\n",
     "{}",
     "x\nyes\nz"},
    {"{%- if true -%}  a  {%- endif -%}  \n b",
     "{}",
     "ab"},
    {"{{ \"a\" }}\n{{ \"b\" }}\n",
     "{}",
     "a\nb"},
    {"{# comment #}\n  {# indented comment #}\nx",
     "{}",
     "x"},
    {"{% macro greet(name, punct=\"!\") -%}\nHi {{ name }}{{ punct }}\n{%- endmacro %}{{ greet(\"A\") }} {{ greet(\"B\", punct=\"?\") }}",
     "{}",
     "Hi A! Hi B?"},
    {"{%- for message in messages %}{{ message.role | upper }}{% if not loop.last %},{% endif %}{% endfor %}",
     "{\"messages\": [{\"role\": \"user\"}, {\"role\": \"assistant\"}]}",
     "USER,ASSISTANT"},
    {"{{ bos_token }}{% for m in messages %}[{{ m[\"role\"] }}]{% endfor %}",
     "{\"bos_token\": \"<s>\", \"messages\": [{\"role\": \"user\"}]}",
     "<s>[user]"},
    {"{% set sys = messages[0].content if messages[0].role == \"system\" else \"\" %}{{ sys }}|{{ messages[1:] | length }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"U\"}]}",
     "S|1"},
    {"{{ tools | tojson(indent=4) }}",
     "{\"tools\": [{\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"integer\", \"enum\": [1, 2]}}}}]}",
     "[\n    {\n        \"name\": \"f\",\n        \"parameters\": {\n            \"type\": \"object\",\n            \"properties\": {\n                \"x\": {\n                    \"type\": \"integer\",\n                    \"enum\": [\n                        1,\n                        2\n                    ]\n                }\n            }\n        }\n    }\n]"},
    {"{{ x | tojson }}|{{ \"<tag>&\" | tojson }}|{{ 3.0 | tojson }}|{{ none | tojson }}",
     "{\"x\": {\"k\": [\"a\", {\"b\": false}]}}",
     "{\"k\": [\"a\", {\"b\": false}]}|\"<tag>&\"|3.0|null"},
    {"{% for c in \"h\303\251llo\" %}[{{ c }}]{% endfor %} {{ \"h\303\251llo\" | length }} {{ \"h\303\251llo\" | upper }}",
     "{}",
     "[h][\303\251][l][l][o] 5 H\303\211LLO"},
    {"{{ loop_var | default(\"none\") }} {{ 0 | default(5) }} {{ 0 | default(5, true) }} {{ none | d(\"n\") }}",
     "{}",
     "none 0 5 None"},
    {"{{ [1, 2, 3] | map(\"string\") | join(\"-\") }} {{ [\"a\", \"B\"] | map(\"upper\") | list }}",
     "{}",
     "1-2-3 ['A', 'B']"},
    {"{{ xs | selectattr(\"active\") | map(attribute=\"id\") | list }} {{ xs | map(attribute=\"missing\", default=\"?\") | list }}",
     "{\"xs\": [{\"id\": 1, \"active\": true}, {\"id\": 2, \"active\": false}]}",
     "[1] ['?', '?']"},
    {"{% for k, v in d | dictsort %}{{ k }}:{{ v }} {% endfor %}",
     "{\"d\": {\"b\": 1, \"a\": 2, \"C\": 3}}",
     "a:2 b:1 C:3 "},
    {"{{ \"one two  three\" | wordcount }} {{ -3 | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ \"AbC\" is lower }}",
     "{}",
     "3 3 2.57 2.0 False"},
    {"{{ \"%d%%\" % 50 }} {{ \"x\" in undef_val | default([]) }}",
     "{\"none_val\": null}",
     "50% False"},
    {"{% if messages[0][\"role\"] == \"system\" %}{% set loop_messages = messages[1:] %}{% else %}{% set loop_messages = messages %}{% endif %}{% for m in loop_messages %}{{ loop.index0 }}{{ m.role }}{% endfor %}",
     "{\"messages\": [{\"role\": \"system\"}, {\"role\": \"user\"}, {\"role\": \"assistant\"}]}",
     "0user1assistant"},
    {"{{- \"a\" -}}\n\n  {{- \"b\" }}  \n{{ \"c\" }}",
     "{}",
     "ab  \nc"},
    {"<<{% if true %}\n\tx{% endif %}\n>>",
     "{}",
     "<<\tx>>"},
};

// Renders src with vars (JSON text); returns malloc'ed output or NULL with err set.
static char *render(const char *src, const char *vars, mx_error *err) {
    jinja_template *t = jinja_template_parse(src, strlen(src), err);
    if (!t) return NULL;
    json_t *v = vars ? json_loads(vars, 0, NULL) : NULL;
    char *out = jinja_template_render(t, v, err);
    json_decref(v);
    jinja_template_free(t);
    return out;
}

static void test_render_cases(void) {
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        mx_error err = {{0}};
        char *out = render(CASES[i].template, CASES[i].vars, &err);
        CHECK_MSG(out != NULL, "case %zu: %s\n  template: %s", i, err.msg, CASES[i].template);
        if (out) CHECK_MSG(strcmp(out, CASES[i].expected) == 0, "case %zu:\n  template: %s\n  got:      [%s]\n  expected: [%s]", i,
                           CASES[i].template, out, CASES[i].expected);
        free(out);
    }
}

typedef struct error_case {
    const char *template;
    const char *vars;
    const char *needle1; // both must appear in the message
    const char *needle2;
} error_case;

static const error_case ERRORS[] = {
    {"a\n{{ x | nosuchfilter }}", NULL, "line 2", "unknown filter 'nosuchfilter'"},
    {"{% if x is nosuchtest %}{% endif %}", NULL, "line 1", "unknown test 'nosuchtest'"},
    {"{{ [1] | map('nosuch') | list }}", NULL, "line 1", "unknown filter 'nosuch'"},
    {"{{ [1] | select('nosuch') | list }}", NULL, "line 1", "unknown test"},
    {"x\n\n{% for m in ms %}\n{{ m }}", NULL, "line 3", "unclosed 'for' block (expected 'endfor')"},
    {"{% if a %}x{% elif b %}", NULL, "line 1", "unclosed 'if' block (expected 'endif')"},
    {"{{ 1 + }}", NULL, "line 1", "expected an expression"},
    {"{{ (1, 2 }}", NULL, "line 1", "unclosed '{{' tag"},
    {"{{ [1, 2) }}", NULL, "line 1", "got ')'"},
    {"{{ 'abc }}", NULL, "line 1", "unterminated string"},
    {"{{ x", NULL, "line 1", "unclosed '{{' tag"},
    {"{# never closed", NULL, "line 1", "unclosed comment"},
    {"{% endfor %}", NULL, "line 1", "unexpected 'endfor'"},
    {"{% frobnicate %}", NULL, "line 1", "unknown tag 'frobnicate'"},
    {"{% include 'x.jinja' %}", NULL, "line 1", "unsupported tag 'include'"},
    {"{% break %}", NULL, "line 1", "'break' outside of a loop"},
    {"{{ 1 @ 2 }}", NULL, "line 1", "unexpected character '@'"},
    // Nesting past the printers' depth bound is an error, not a stack overflow.
    {"{% set ns = namespace(x=[]) %}{% for i in range(300) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}", NULL, "line 1", "too large"},
    {"{% set ns = namespace(x=[]) %}{% for i in range(300) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x | tojson }}", NULL, "line 1", "nested too deeply"},
    {"\n\n{{ raise_exception('Only user and assistant roles are supported!') }}", NULL, "line 3",
     "raise_exception: Only user and assistant roles are supported!"},
    {"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, "line 1", "recursion too deep"},
    {"{{ foo.bar }}", NULL, "line 1", "'foo' is undefined"},
    {"{{ m.content + 'x' }}", "{\"m\": {\"content\": null}}", "line 1", "unsupported operand type(s) for +"},
    {"{{ 'a' < 1 }}", NULL, "line 1", "'<' not supported"},
    {"{{ 1 // 0 }}", NULL, "line 1", "division or modulo by zero"},
    {"{% set x.y = 1 %}", "{\"x\": {}}", "line 1", "non-namespace"},
    {"{{ range(1000000) | length }}", NULL, "line 1", "range() too big"},
    {"{% set xs = range(100000) %}{% for i in xs %}{% for j in xs %}{% endfor %}{% endfor %}", NULL, "line 1", "step limit"},
    // Values sharing sub-values: walks over their 2^40 paths, and repeated linear scans, end at
    // the step limit instead of running for hours; printing them ends at the output cap.
    {"{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(40) %}{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ ns.a == ns.b }}", NULL, "line 1", "step limit"},
    {"{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(40) %}{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ ns.a < ns.b + [2] }}", NULL, "line 1", "step limit"},
    {"{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(40) %}{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ ns.a in [0, ns.b] }}", NULL, "line 1", "step limit"},
    {"{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(40) %}{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ {ns.a: 1, ns.b: 2} }}", NULL, "line 1", "step limit"},
    {"{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(40) %}{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ [ns.a, ns.b] | unique | list }}", NULL, "line 1", "step limit"},
    {"{% set ns = namespace(a=[1]) %}{% for i in range(40) %}{% set ns.a = [ns.a, ns.a] %}{% endfor %}{{ ns.a | tojson }}", NULL, "line 1", "step limit"},
    {"{% set ns = namespace(a=[1]) %}{% for i in range(40) %}{% set ns.a = [ns.a, ns.a] %}{% endfor %}{{ ns.a }}", NULL, "line 1", "step limit"},
    {"{% set ns = namespace(a=[1]) %}{% for i in range(40) %}{% set ns.a = [ns.a, ns.a] %}{% endfor %}{{ ns.a | string | length }}", NULL, "line 1", "step limit"},
    {"{% set ns = namespace(a=[1]) %}{% for i in range(40) %}{% set ns.a = [ns.a, ns.a] %}{% endfor %}{{ [ns.a] | join(',') }}", NULL, "line 1", "step limit"},
    {"{% set ns = namespace(a=[1]) %}{% for i in range(40) %}{% set ns.a = [ns.a, ns.a] %}{% endfor %}{{ '%s' % ns.a }}", NULL, "line 1", "step limit"},
    {"{% set xs = range(20000) | list %}{% for i in xs %}{{ 19999 in xs }}{% endfor %}", NULL, "line 1", "step limit"},
    {"{% set s = 'x' * 10000000 %}{% for i in range(50000) %}{{ s[i] }}{% endfor %}", NULL, "line 1", "step limit"},
    {"{% set s = 'x' * 10000000 %}{% for i in range(50000) %}{{ 'y' in s }}{% endfor %}", NULL, "line 1", "step limit"},
    {"{% set s = 'x' * 10000000 %}{% for i in range(50000) %}{{ s | length }}{% endfor %}", NULL, "line 1", "step limit"},
    {"{% set s = 'x' * 10000000 %}{% for i in range(50000) %}{{ s.find('y') }}{% endfor %}", NULL, "line 1", "step limit"},
    // Escaping every byte of a long string ends at the output cap in well under a second.
    {"{{ ('\\x0b' * 20000000,) }}", NULL, "line 1", "too large"},
    {"{{ ('\\x0b' * 20000000) | tojson }}", NULL, "line 1", "too large"},
    {"{{ nothing() }}", NULL, "line 1", "'nothing' is undefined"},
    {"{{ 'x' * 1000000000000 }}", NULL, "line 1", "too large"},
    {"{% for a, b in [[1, 2, 3]] %}{% endfor %}", NULL, "line 1", "unpack"},
    {"{{ 5 | tojson(indent='x') }}", NULL, "line 1", "indent"},
    {"{{ undefined_value | tojson }}", NULL, "line 1", "not JSON serializable"},
};

static void test_errors(void) {
    for (size_t i = 0; i < sizeof ERRORS / sizeof *ERRORS; i++) {
        mx_error err = {{0}};
        char *out = render(ERRORS[i].template, ERRORS[i].vars, &err);
        CHECK_MSG(out == NULL, "error case %zu rendered: [%s]", i, out ? out : "");
        CHECK_MSG(strstr(err.msg, ERRORS[i].needle1) && strstr(err.msg, ERRORS[i].needle2),
                  "error case %zu: message \"%s\" lacks \"%s\" / \"%s\"", i, err.msg, ERRORS[i].needle1, ERRORS[i].needle2);
        free(out);
    }
}

// Deep nesting in the source must fail cleanly, not overflow the stack.
static void test_deep_nesting(void) {
    size_t depth = 100000;
    char *src = malloc(depth * 2 + 16);
    size_t n = 0;
    memcpy(src + n, "{{ ", 3), n += 3;
    for (size_t i = 0; i < depth; i++) src[n++] = '(';
    src[n++] = '1';
    for (size_t i = 0; i < depth; i++) src[n++] = ')';
    memcpy(src + n, " }}", 4);
    mx_error err = {{0}};
    char *out = render(src, NULL, &err);
    CHECK(out == NULL);
    CHECK_MSG(strstr(err.msg, "nested too deeply") != NULL, "%s", err.msg);
    free(out);
    // Same for nested blocks.
    n = 0;
    for (size_t i = 0; i < 5000; i++) memcpy(src + n, "{% if 1 %}", 10), n += 10;
    src[n] = 0;
    out = render(src, NULL, &err);
    CHECK(out == NULL);
    CHECK_MSG(strstr(err.msg, "nested too deeply") != NULL, "%s", err.msg);
    free(out);
    free(src);
    // Chains nest their nodes as deeply as they are long (a + b + c ..., x|f|g ..., x.a.b ...).
    static const char *const links[] = {" + 1", " * 1", " ** 1", "|e", ".a", "[0]", "()", " and 1", " or 1",
                                        " if 1", " is odd"};
    for (size_t k = 0; k < sizeof links / sizeof *links; k++) {
        size_t len = strlen(links[k]), reps = 20000;
        char *chain = malloc(reps * len + 16);
        n = 0;
        memcpy(chain + n, "{{ x", 4), n += 4;
        for (size_t i = 0; i < reps; i++) memcpy(chain + n, links[k], len), n += len;
        memcpy(chain + n, " }}", 4);
        mx_error e2 = {{0}};
        out = render(chain, "{\"x\": 1}", &e2);
        CHECK_MSG(out == NULL && strstr(e2.msg, "nested too deeply") != NULL, "chain '%s': %s", links[k], e2.msg);
        free(out);
        free(chain);
    }
    // A call with thousands of keyword arguments, in a long loop: each evaluated node and each
    // keyword-parameter comparison spends work units (the loop used to run for a minute).
    {
        size_t cap = 3000 * 16 + 256;
        char *wide = malloc(cap);
        n = (size_t)snprintf(wide, cap, "{%% macro m(");
        for (int i = 0; i < 3000; i++) n += (size_t)snprintf(wide + n, cap - n, "%sa%d", i ? "," : "", i);
        n += (size_t)snprintf(wide + n, cap - n, ") %%}{%% endmacro %%}{%% for i in range(100000) %%}{{ m(");
        for (int i = 0; i < 3000; i++) n += (size_t)snprintf(wide + n, cap - n, "%sa%d=1", i ? "," : "", i);
        snprintf(wide + n, cap - n, ") }}{%% endfor %%}");
        mx_error e2 = {{0}};
        out = render(wide, NULL, &e2);
        CHECK_MSG(out == NULL && strstr(e2.msg, "step limit") != NULL, "%s", e2.msg);
        free(out);
        free(wide);
    }
    // A recursive macro multiplies the nesting of its body; rendering bounds the total.
    for (int body = 0; body < 2; body++) {
        char *m = malloc(4096);
        n = (size_t)sprintf(m, "{%% macro f(n) %%}%s{{ f(n + 1)", body ? "{% if 1 %}{% if 1 %}" : "");
        for (int i = 0; i < 150; i++) n += (size_t)sprintf(m + n, "%s", body ? " + 1" : "|e");
        sprintf(m + n, " }}%s{%% endmacro %%}{{ f(0) }}", body ? "{% endif %}{% endif %}" : "");
        mx_error e2 = {{0}};
        out = render(m, NULL, &e2);
        CHECK_MSG(out == NULL && strstr(e2.msg, "nested too deeply when rendered") != NULL, "%s", e2.msg);
        free(out);
        free(m);
    }
}

// Malformed inputs: every prefix of a real-looking template either renders or fails with a message.
static void test_truncations(void) {
    const char *src =
        "{%- set ns = namespace(x=0) %}{% for m in messages if m.role != 'tool' -%}\n"
        "  {{- '<' ~ m.role ~ '>' }}{{ m.content | trim }}{% if not loop.last %}\\n{% endif %}\n"
        "{%- endfor %}{# done #}{{ messages | map(attribute='role') | join(',') | tojson }}";
    const char *vars = "{\"messages\": [{\"role\": \"user\", \"content\": \" hi \"}]}";
    size_t n = strlen(src), failures = 0;
    for (size_t k = 0; k <= n; k++) {
        char *part = strndup(src, k);
        mx_error err = {{0}};
        char *out = render(part, vars, &err);
        if (!out && err.msg[0] == 0) failures++;
        free(out);
        free(part);
    }
    CHECK_MSG(failures == 0, "%zu prefixes failed without a message", failures);
}

static void test_loop_controls_and_defaults(void) {
    mx_error err = {{0}};
    // An unknown filter in a branch that is not taken does not stop the render (as in jinja2).
    char *lazy = render("{% if false %}{{ x | nosuch }}{% endif %}ok", NULL, &err);
    CHECK_MSG(lazy && strcmp(lazy, "ok") == 0, "%s", err.msg);
    free(lazy);
    char *out = render("{% for x in xs %}{{ x }}{% else %}none{% endfor %}", "{\"xs\": []}", &err);
    CHECK(out && strcmp(out, "none") == 0);
    free(out);
    // A single trailing newline is dropped, CRLF normalized.
    out = render("a\r\nb\n", NULL, &err);
    CHECK(out && strcmp(out, "a\nb") == 0);
    free(out);
    out = render("", NULL, &err);
    CHECK(out && strcmp(out, "") == 0);
    free(out);
}

#define N_THREADS 4

typedef struct thread_arg {
    const jinja_template *t;
    json_t *vars;
    int ok;
} thread_arg;

static void *render_many(void *p) {
    thread_arg *a = p;
    a->ok = 1;
    for (int i = 0; i < 200; i++) {
        mx_error err = {{0}};
        char *out = jinja_template_render(a->t, a->vars, &err);
        if (!out || strcmp(out, "0:a,1:b,2:c|3") != 0) a->ok = 0;
        free(out);
    }
    return NULL;
}

static void test_threads(void) {
    const char *src = "{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + 1 %}"
                      "{{ loop.index0 }}:{{ x }}{{ ',' if not loop.last }}{% endfor %}|{{ ns.n }}";
    mx_error err = {{0}};
    jinja_template *t = jinja_template_parse(src, strlen(src), &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    if (!t) return;
    json_t *vars = json_loads("{\"xs\": [\"a\", \"b\", \"c\"]}", 0, NULL);
    pthread_t th[N_THREADS];
    thread_arg args[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        args[i] = (thread_arg){.t = t, .vars = vars};
        pthread_create(&th[i], NULL, render_many, &args[i]);
    }
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(th[i], NULL);
        CHECK(args[i].ok);
    }
    json_decref(vars);
    jinja_template_free(t);
}

int main(void) {
    test_render_cases();
    test_errors();
    test_deep_nesting();
    test_truncations();
    test_loop_controls_and_defaults();
    test_threads();
    jinja_template_free(NULL);
    return check_finish();
}
