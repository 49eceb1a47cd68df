#!/usr/bin/env python3
"""Make tests/tokenizer/chat_cases.jsonl: DeepSeek-V4 chat prompts for engine/chat.c to reproduce byte for byte.

    python3 tests/tokenizer/make_chat_cases.py > tests/tokenizer/chat_cases.jsonl
    python3 tests/tokenizer/make_chat_cases.py --reference DIR > /dev/null   # also check against DIR/encoding_dsv4.py

Source of the rules: DeepSeek publishes V4's chat encoding as `encoding/encoding_dsv4.py` in the model
repository (deepseek-ai/DeepSeek-V4-Flash, deepseek-ai/DeepSeek-V4-Pro). Read from the copies in
  - sgl-project/sglang, python/sglang/srt/entrypoints/openai/encoding_dsv4.py (commit 00370f2784265e663d500abcc6a59b13854840f5,
    "Adapted from the DeepSeek-V4 release reference implementation"),
  - flagos-ai/DeepSeek-V4-FlagOS, encoding_dsv4.py (commit 5502249817d1e3acdf6037ac8c33810a030e1ee0, "Copy from
    modelscope.cn/models/deepseek-ai/DeepSeek-V4-Flash"),
  - supermy/ds4rs, encoding/encoding_dsv4.py (commit 9d80e89), whose encoding/tests/ hold the model repository's
    examples (test_input_N.json -> test_output_N.txt); that copy passes them,
which agree on everything below. `encode_messages` is re-typed here for what sluice supports — roles system, user,
assistant, developer; thinking on/off; drop_thinking=True; BOS; no tools, tool calls, tasks, context or
reasoning-effort prefix — keeping its steps (merge_tool_messages, _drop_thinking_messages, render_message) so
the two can be compared line by line. With --reference DIR, every case is also encoded by DIR/encoding_dsv4.py
(any of the copies above) and must come out the same: the committed cases were checked that way against the
ds4rs copy, and that copy reproduces the published test_output_2.txt.

Each output line: {"name", "thinking", "messages", "prompt"}; the prompt is the exact text (JSON-escaped).
"""
import argparse
import copy
import importlib.util
import json
import os
import sys

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
THINK_START = "<think>"
THINK_END = "</think>"


def last_user_index(messages):
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") in ("user", "developer"):
            return i
    return -1


def merge_user_messages(messages):
    """merge_tool_messages without tool messages: a user message right after a user message becomes another
    text block of it; the blocks are joined by blank lines when rendered."""
    merged = []
    for msg in messages:
        msg = copy.deepcopy(msg)
        if msg["role"] == "user":
            block = msg.get("content", "")
            if merged and merged[-1]["role"] == "user" and "blocks" in merged[-1]:
                merged[-1]["blocks"].append(block)
            else:
                merged.append({"role": "user", "content": msg.get("content", ""), "blocks": [block]})
        else:
            merged.append(msg)
    return merged


def drop_thinking(messages):
    """_drop_thinking_messages: before the last user/developer message, assistant turns lose their reasoning
    and developer messages are dropped."""
    lu = last_user_index(messages)
    out = []
    for i, msg in enumerate(messages):
        role = msg["role"]
        if role in ("user", "system") or i >= lu:
            out.append(msg)
        elif role == "assistant":
            msg = copy.copy(msg)
            msg.pop("reasoning_content", None)
            out.append(msg)
    return out


def render(index, messages, thinking):
    """render_message with drop_thinking=True, no tools / tool calls / tasks / wo_eos / effort prefix."""
    msg = messages[index]
    role = msg["role"]
    content = msg.get("content")
    lu = last_user_index(messages)
    prompt = ""
    if role == "system":
        prompt += content or ""
    elif role == "developer":
        assert content, "developer message without content"
        prompt += USER + content
    elif role == "user":
        prompt += USER + "\n\n".join(msg["blocks"])
    elif role == "assistant":
        thinking_part = ""
        if thinking and index > lu:
            thinking_part = (msg.get("reasoning_content") or "") + THINK_END
        prompt += thinking_part + (content or "") + EOS
    else:
        raise ValueError("role %r" % role)
    if index + 1 < len(messages) and messages[index + 1]["role"] not in ("assistant", "latest_reminder"):
        return prompt
    if role in ("user", "developer"):
        prompt += ASSISTANT + (THINK_START if thinking and index >= lu else THINK_END)
    return prompt


def encode(messages, thinking):
    full = merge_user_messages(messages)
    if thinking:
        full = drop_thinking(full)
    return BOS + "".join(render(i, full, thinking) for i in range(len(full)))


def S(c):
    return {"role": "system", "content": c}


def U(c):
    return {"role": "user", "content": c}


def D(c):
    return {"role": "developer", "content": c}


def A(c, r=None):
    m = {"role": "assistant", "content": c}
    if r is not None:
        m["reasoning_content"] = r
    return m


CASES = [
    ("user", [U("What is 2+2?")]),
    ("system_user", [S("You are a helpful assistant."), U("What is 2+2?")]),
    ("multi_turn", [S("Be brief."), U("Hi"), A("Hello! What can I do for you?", "A greeting; greet back."),
                    U("Capital of Italy?"), A("Rome.", "Italy's capital is Rome.")]),
    ("multi_turn_open", [S("Be brief."), U("Hi"), A("Hello!", "Greet back."), U("And 3*3?")]),
    ("assistant_last_no_reasoning", [U("Say yes."), A("Yes.")]),
    ("consecutive_users", [U("First part."), U("Second part."), U("Third.")]),
    ("users_merged_mid", [S("sys"), U("a"), U("b"), A("c", "why c"), U("d"), U("e")]),
    ("developer_early", [S("Search agent."), D("Find the tallest tree."), A("Found it.", "searched"),
                         U("How tall?")]),
    ("developer_last", [S("sys"), U("context"), D("Answer with citations.")]),
    ("user_after_developer", [D("dev note"), U("question")]),
    ("system_between", [U("one"), A("two", "r2"), S("New rules apply."), U("three")]),
    ("no_user", [S("sys"), A("unprompted", "thought")]),
    ("assistant_pair", [U("q"), A("a1", "t1"), A("a2", "t2")]),
    ("system_only", [S("Only a system prompt.")]),
    ("empty", []),
    ("empty_contents", [S(""), U(""), A("", ""), U("")]),
    ("unicode", [S("该助手为DeepSeek。"), U("Ça va? 🙂 — naïve café\nnew line\ttab"), A("Très bien 👍", "思考…"),
                 U("日本語で？")]),
    ("special_text_in_content", [U("literal " + USER + " and " + THINK_END + " and " + EOS), A("ok</think>x", "r")]),
    ("nul_byte", [U("a\u0000b"), A("c\u0000", "\u0000")]),
    ("reasoning_only_last_kept", [U("q1"), A("a1", "LONG EARLIER REASONING"), U("q2"), A("a2", "kept")]),
]


def load_reference(d):
    spec = importlib.util.spec_from_file_location("encoding_dsv4", os.path.join(d, "encoding_dsv4.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reference", help="directory with DeepSeek's encoding_dsv4.py to check every case against")
    args = ap.parse_args()
    ref = load_reference(args.reference) if args.reference else None
    for name, msgs in CASES:
        for thinking in (False, True):
            prompt = encode(msgs, thinking)
            if ref is not None:
                want = ref.encode_messages(copy.deepcopy(msgs), thinking_mode="thinking" if thinking else "chat")
                if want != prompt:
                    sys.exit("make_chat_cases: %s thinking=%s differs from the reference:\n%r\n%r" %
                             (name, thinking, prompt, want))
            print(json.dumps({"name": name, "thinking": thinking, "messages": msgs, "prompt": prompt},
                             ensure_ascii=False))
    if ref is not None:
        print("make_chat_cases: %d cases agree with %s" % (2 * len(CASES), args.reference), file=sys.stderr)


if __name__ == "__main__":
    main()
