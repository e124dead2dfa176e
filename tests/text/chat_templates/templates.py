"""Chat templates as popular checkpoints ship them in tokenizer_config.json ("chat_template"), with
the special tokens those checkpoints pass as bos_token and eos_token, and one template of our own
that uses every construct of the supported subset."""

TINYLLAMA_CHAT = (  # TinyLlama/TinyLlama-1.1B-Chat-v1.0 (zephyr style)
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n"
    "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}"
)

LLAMA2_CHAT = (  # meta-llama/Llama-2-7b-chat-hf
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
)

LLAMA3_INSTRUCT = (  # meta-llama/Meta-Llama-3-8B-Instruct
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

QWEN2_CHATML = (  # Qwen/Qwen2-1.5B-Instruct (ChatML)
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

MISTRAL_INSTRUCT = (  # mistralai/Mistral-7B-Instruct-v0.2 (later revision, with whitespace control)
    "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] %}\n"
    "    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n{%- endif %}\n\n"
    "{{- bos_token }}\n{%- for message in loop_messages %}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
    "        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}\n"
    "    {%- endif %}\n    {%- if message['role'] == 'user' %}\n"
    "        {%- if loop.first and system_message is defined %}\n"
    "            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n"
    "        {%- else %}\n            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n        {%- endif %}\n"
    "    {%- elif message['role'] == 'assistant' %}\n        {{- ' ' + message['content'] + eos_token}}\n"
    "    {%- else %}\n"
    "        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}\n"
    "    {%- endif %}\n{%- endfor %}\n"
)

GEMMA_IT = (  # google/gemma-7b-it, google/gemma-2-2b-it
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)

PHI3_MINI = (  # microsoft/Phi-3-mini-4k-instruct
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"
)

QWEN3 = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""

# Every construct of the subset, with the whitespace rules (trim_blocks, lstrip_blocks, {%+ %},
# {%- -%}, {{- -}}, comments) in the places they differ.
FEATURES = """{# a comment: gone, and the newline after it #}
{% set ns = namespace(count=0, roles=[]) %}
{% set title = 'chat ' ~ messages | length ~ ' ' ~ (messages | length > 2) %}
  {{ title | title }} {{ title | upper }} {{ 'MiXeD' | lower }} {{ 'word  ' | capitalize }}|
{% for message in messages if message.role != 'tool' %}
    {%- set ns.count = ns.count + loop.length %}
    {%- set ns.roles = ns.roles + [message['role']] %}
  {{ loop.index }}/{{ loop.length }} {{ loop.index0 }} {{ loop.revindex }} {{ loop.first }} {{ loop.last }}: {{ message.role | upper }}
  {%+ if message.content.startswith('  ') or message.content.endswith('  ') %}[padded]{% endif %}
  {{- ' ' ~ (message.content | trim | replace('\n', '\\\\n') | length) -}}
  {{ ' even' if loop.index is even else ' odd' }}
{% else %}
  no messages
{% endfor %}
roles={{ ns.roles | join(',') }} count={{ ns.count }} first={{ ns.roles | first }} last={{ ns.roles | last }}
{{ ns.roles[1:] }} {{ ns.roles[::-1] }} {{ ns.roles[-1] }} {{ (ns.roles * 2)[1:4:2] }} {{ 'abcdef'[1:-1] }}
{% set d = {'b': 1, 'a': [1.5, none, true, 'x"y'], 'c': {}} %}
{{ d | tojson }} {{ d | tojson(indent=2) }} {{ d }} {{ d.a }} {{ d['b'] + 2 * 3 - 1 }} {{ 7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 5 }}
{% for key, val in d.items() %}{{ key }}={{ val is mapping }},{% endfor %} {% for k, v in d | items %}{{ k }};{% endfor %}
{{ d.missing is defined }} {{ d.missing is undefined }} {{ d.get('b') }} {{ d.get('z', 'dflt') }} {{ d.keys() | list }}
{{ undefined_name | default('fallback') }} {{ '' | default('empty', true) }} {{ none is none }} {{ 3 is odd }} {{ 4 is divisibleby(2) }}
{{ 'a' in 'cat' }} {{ 'b' not in ns.roles }} {{ 'b' in d }} {{ 1 in [1, 2] }} {{ not true or false and true }}
{{ '  x y  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ ' a '.lstrip() }}|{{ ' a '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a b'.split() }}
{{ 'Hello'.upper() }} {{ 'Hello'.lower() }} {{ 'ab'.replace('a', 'z') }} {{ 'x y'.title() }} {{ 'abc'.startswith(('x', 'a')) }}
{% if extra_list is defined %}
    {% for item in extra_list %}{{ item.name }}:{{ item.value | tojson }} {% endfor %}
{% elif false %}
never
{% else %}
    no extra
{% endif %}
{{ 1 == 1.0 }} {{ 0.1 + 0.2 }} {{ 1.0 if false else 2.50 }} {{ [] | length }} {{ [3, 1] | reverse | list }} {{ 'ab' | reverse }}
{%- if add_generation_prompt -%}
    <generate>
{%- endif %}
tail line
"""


def template_file(name):
    """A template of this folder: llama3_1_instruct.jinja (meta-llama/Llama-3.1-8B-Instruct's, as
    the checkpoint ships it), expressions.jinja (operators, literals, filters, tests, methods,
    printing, as checked line by line against jinja2) and whitespace.jinja (whitespace control,
    trim_blocks / lstrip_blocks, scopes of set in loops and ifs)."""
    import os
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), name), encoding="utf-8", newline="") as f:
        return f.read()


def golden_llama_template():
    """tests/golden/llama/tokenizer_config.json's template and tokens (the server's test model)."""
    import json
    import os
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "golden", "llama", "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    return config["chat_template"], config["bos_token"], config["eos_token"]


TEMPLATES = {
    "tinyllama_chat": (TINYLLAMA_CHAT, "<s>", "</s>"),
    "llama2_chat": (LLAMA2_CHAT, "<s>", "</s>"),
    "llama3_instruct": (LLAMA3_INSTRUCT, "<|begin_of_text|>", "<|eot_id|>"),
    "qwen2_chatml": (QWEN2_CHATML, "", "<|im_end|>"),
    "mistral_instruct": (MISTRAL_INSTRUCT, "<s>", "</s>"),
    "gemma_it": (GEMMA_IT, "<bos>", "<eos>"),
    "phi3_mini": (PHI3_MINI, "<s>", "<|endoftext|>"),
    "qwen3": (QWEN3, "", "<|im_end|>"),
    "features": (FEATURES, "<s>", "</s>"),
    "llama3_1_instruct": (template_file("llama3_1_instruct.jinja"), "<|begin_of_text|>", "<|eot_id|>"),
    "expressions": (template_file("expressions.jinja"), "<s>", "</s>"),
    "whitespace": (template_file("whitespace.jinja"), "<s>", "</s>"),
    "whitespace_crlf": (template_file("whitespace.jinja").replace("\n", "\r\n"), "<s>", "</s>"),
    "golden_llama": golden_llama_template(),
}
