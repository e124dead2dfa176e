"""Writes chat_golden.json: for each template of templates.py and each conversation below, the text
transformers renders (the code behind tokenizer.apply_chat_template(messages, tokenize=False,
add_generation_prompt=...)), or the message of the error it raises. tests/text/chat_template_test.cpp
renders every case with shardgraph::text::chat_template and compares byte for byte.

Run from the repository root: python3 tests/text/chat_templates/make_chat_golden.py
(transformers >= 4.43 and jinja2 >= 3.1; made with transformers 5.25, jinja2 3.1.6)."""
import json
import os
import sys

import jinja2
import transformers
from transformers.utils.chat_template_utils import render_jinja_template

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from templates import TEMPLATES  # noqa: E402

TRICKY = "  Résumé: naïve café — 日本語 🙂\n\tsecond line with 'single' and \"double\" quotes \\ backslash  "
CONVERSATIONS = {
    "one_user_turn": [("user", "Hello!")],
    "system_and_user": [("system", "You are a pirate."), ("user", "Where is the treasure?")],
    "multi_turn_with_system": [
        ("system", "Answer in one word."),
        ("user", "Capital of France?"),
        ("assistant", "Paris"),
        ("user", "And of Italy?"),
    ],
    "multi_turn_without_system": [
        ("user", "2 + 2?"),
        ("assistant", " 4 "),
        ("user", "Times 3?"),
        ("assistant", "12"),
    ],
    "tricky_text": [("user", TRICKY), ("assistant", "<think>\nplan it\n</think>\n\n" + TRICKY), ("user", "")],
    "roles_not_alternating": [("user", "one"), ("user", "two")],
    "tool_result": [("user", "Weather in Paris?"), ("assistant", "Let me check."), ("tool", "22 degrees, sunny"),
                    ("assistant", "It is 22 degrees and sunny.")],
    "empty": [],
}
WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                                "parameters": {"type": "object", "properties": {
                                                    "city": {"type": "string"}}, "required": ["city"]}}}
# Extra template variables for some cases (the C++ side passes them to render()).
EXTRAS = {
    "qwen3": [
        {"enable_thinking": False},
        {"tools": [WEATHER_TOOL]},
    ],
    "llama3_1_instruct": [
        {"date_string": "08 Dec 2026"},
        {"builtin_tools": ["brave_search", "wolfram_alpha", "code_interpreter"], "tools_in_user_message": False},
        {"tools": [WEATHER_TOOL]},
    ],
    "features": [{"extra_list": [{"name": "n", "value": [1, 2.5, None, "é\n"]}, {"name": "m", "value": {"k": True}}]}],
}


def render(source, bos, eos, messages, add_generation_prompt, extra):
    chat = [{"role": role, "content": content} for role, content in messages]
    kwargs = dict(extra)
    tools = kwargs.pop("tools", None)
    try:
        rendered, _ = render_jinja_template(conversations=[chat], tools=tools, chat_template=source,
                                            add_generation_prompt=add_generation_prompt, bos_token=bos,
                                            eos_token=eos, **kwargs)
        return {"expected": rendered[0]}
    except jinja2.exceptions.UndefinedError as error:  # a key of something that is not there
        return {"error": str(error), "error_kind": "undefined"}
    except jinja2.exceptions.TemplateError as error:  # raise_exception(message)
        return {"error": str(error), "error_kind": "raise_exception"}


def main():
    out = {"transformers": transformers.__version__, "jinja2": jinja2.__version__, "templates": []}
    for name, (source, bos, eos) in TEMPLATES.items():
        cases = []
        for conversation, messages in CONVERSATIONS.items():
            for extra in [{}] + EXTRAS.get(name, []):
                for add_generation_prompt in (False, True):
                    case = {"conversation": conversation, "messages": [list(m) for m in messages],
                            "add_generation_prompt": add_generation_prompt, "extra": extra}
                    case.update(render(source, bos, eos, messages, add_generation_prompt, extra))
                    cases.append(case)
        out["templates"].append({"name": name, "source": source, "bos_token": bos, "eos_token": eos, "cases": cases})
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "chat_golden.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    total = sum(len(t["cases"]) for t in out["templates"])
    errors = sum("error" in c for t in out["templates"] for c in t["cases"])
    print(f"{path}: {len(out['templates'])} templates, {total} cases ({errors} raise errors)")


if __name__ == "__main__":
    main()
