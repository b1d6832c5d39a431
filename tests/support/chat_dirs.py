"""Checkpoint directories for chat tests: a byte-level BPE trained on a few lines with
each family's control tokens, a tokenizer_config.json naming BOS/EOS, and a chat
template written here in the style of the family (ChatML as Qwen2, Llama 3, Mistral's
[INST], Gemma's turns with raise_exception on a bad role order). Nothing downloaded."""
from __future__ import annotations

import json

import pytest

__all__ = ["TEMPLATES", "STYLES", "chat_dir", "chat_model_dir", "LINES"]

LINES = ["the block reads the stream and writes a small update back into it",
         "a residual stream flows from the embedding to the output",
         "Hello! How are you today? I am fine, thank you.",
         "naïve café: <b>bold</b> & 'quotes' 🙂",
         "What is the capital of France? Paris is the capital."]

CHATML = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

LLAMA3 = (
    "{{- bos_token }}\n"
    "{%- if not date_string is defined %}{%- set date_string = strftime_now('%d %b %Y') %}"
    "{%- endif %}\n"
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- set system_message = messages[0]['content'] | trim %}"
    "{%- set messages = messages[1:] %}"
    "{%- else %}{%- set system_message = '' %}{%- endif %}\n"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{{- 'Today Date: ' + date_string + '\\n\\n' }}"
    "{%- if tools is not none %}{{- tools | tojson(indent=4) }}{%- endif %}"
    "{{- system_message }}{{- '<|eot_id|>' }}\n"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}\n")

MISTRAL = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}"
    "{% endfor %}")

GEMMA = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if message['role'] == 'assistant' %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}")

# a template that prints messages through tojson (no HTML escaping) and uses a namespace
JSONY = (
    "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
    "{{ ns.n }}:{{ m | tojson }}\n{% endfor %}"
    "{% if add_generation_prompt %}>>{% endif %}")

# style: (template, bos, eos, control tokens, where the template is written)
STYLES = {
    "chatml": (CHATML, None, "<|im_end|>", ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
               "tokenizer_config"),
    "llama3": (LLAMA3, "<|begin_of_text|>", "<|eot_id|>",
               ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                "<|end_header_id|>", "<|eot_id|>"], "jinja"),
    "mistral": (MISTRAL, "<s>", "</s>", ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"],
                "tokenizer_config"),
    "gemma": (GEMMA, "<bos>", "<eos>", ["<pad>", "<eos>", "<bos>", "<start_of_turn>",
                                        "<end_of_turn>"], "tokenizer_config"),
    "jsony": (JSONY, "<s>", "</s>", ["<s>", "</s>"], "jinja"),
}
TEMPLATES = {k: v[0] for k, v in STYLES.items()}


def chat_dir(d, style="chatml", vocab=400):
    """Write tokenizer.json, tokenizer_config.json and the template of ``style`` into ``d``;
    the trained tokenizers.Tokenizer."""
    tokenizers = pytest.importorskip("tokenizers")
    template, bos, eos, specials, where = STYLES[style]
    d.mkdir(parents=True, exist_ok=True)
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=specials,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(LINES * 5, trainer)
    tok.save(str(d / "tokenizer.json"))
    cfg = {"eos_token": eos, "model_max_length": 4096}
    if bos is not None:
        cfg["bos_token"] = bos
    if where == "tokenizer_config":
        cfg["chat_template"] = template
    elif where == "jinja":
        (d / "chat_template.jinja").write_text(template, encoding="utf-8")
    else:
        (d / "chat_template.json").write_text(json.dumps({"chat_template": template}),
                                              encoding="utf-8")
    (d / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return tok


def chat_model_dir(d, style="chatml", context=256, seed=0, llama=False, width=32, layers=2,
                   **arch):
    """A whole checkpoint: chat_dir plus a random-weight model (config.json, safetensors)
    whose eos_token_id is the template's end-of-turn token."""
    import blockc
    tok = chat_dir(d, style)
    eos = tok.token_to_id(STYLES[style][2])
    if llama:
        arch = dict(dict(norm="rms", activation="swiglu", positions="rope", kv_heads=2,
                         d_ff=88, qkv_bias=False, out_bias=False, mlp_bias=False,
                         tie_weights=False), **arch)
    cfg = blockc.GPTConfig(vocab=tok.get_vocab_size(), context=context, width=width, heads=4,
                           layers=layers, **arch)
    m = blockc.GPT.random(cfg, seed=seed)
    m.save_pretrained(d)
    for name in ("config.json",):
        p = d / name
        c = json.loads(p.read_text())
        c["eos_token_id"] = eos
        if STYLES[style][1] is not None:  # as real checkpoints: the BOS id beside the string
            c["bos_token_id"] = tok.token_to_id(STYLES[style][1])
        p.write_text(json.dumps(c))
    return m, tok
