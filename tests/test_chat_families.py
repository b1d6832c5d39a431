"""The chat templates of issue 50's families (Qwen3 with enable_thinking, Granite, SmolLM3,
OLMo2: tests/support/family_templates.py; Llama 3's: chat_dirs.LLAMA3), rendered by blockc from the checkpoint
directory (tokenizer_config.json or chat_template.jinja) and from GGUF metadata
(``tokenizer.chat_template`` beside ``tokenizer.ggml.*``, written with the gguf package's
writer as llama.cpp's converter writes them), against transformers' apply_chat_template
on the directory: the same text and the same ids. Tokenizers are trained here on a few
lines (nothing downloaded): Qwen3's byte-level BPE split by Qwen2's pattern after NFC
(GGUF ``pre`` "qwen2"), Llama 3's by its tiktoken-style pattern (``pre`` "llama-bpe"), the
others by GPT-2's."""
import json

import numpy as np
import pytest

import blockc
from blockc.text.gguf import DIGITS_FIRST_PRE_TOKENIZERS, PRE_TOKENIZER_SPLITS, metadata_of
from chat_dirs import LLAMA3
from family_templates import FAMILY_STYLES
from test_tokenizer_families import LINES, STRINGS, _bytelevel

pytest.importorskip("jinja2")
pytest.importorskip("tokenizers")
gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city <now> & 'later'",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]

CONVERSATIONS = [
    [{"role": "user", "content": "Hello! How are you today?"}],
    [{"role": "system", "content": "You are terse."},
     {"role": "user", "content": "What is the capital of France?"}],
    # an assistant turn with its reasoning, before and after the last user query
    [{"role": "user", "content": "What is the capital of France?"},
     {"role": "assistant", "content": "<think>\nIt is Paris.\n</think>\n\nParis is the capital."},
     {"role": "user", "content": "naïve café: <b>bold</b> & 'quotes' 🙂  "},
     {"role": "assistant", "content": "<think>\nsmall\n</think>\n\nOK."}],
    [{"role": "system", "content": "Think first. /no_think"},
     {"role": "user", "content": "What is the capital of France?"}],
]

STYLES = {**FAMILY_STYLES, "llama3": (LLAMA3, "<|begin_of_text|>", "<|eot_id|>", [
    "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
    "<|eot_id|>"], "jinja")}

_GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
#: style -> (GGUF tokenizer.ggml.pre, normalised to NFC first)
PRE = {"qwen3": ("qwen2", True), "llama3": ("llama-bpe", False), "granite": ("refact", False)}

# the keywords each family's template reads beyond the conversation
VARIANTS = {
    "qwen3": [{}, {"enable_thinking": True}, {"enable_thinking": False}, {"tools": TOOLS}],
    "smollm3": [{}, {"enable_thinking": False},
                {"xml_tools": [t["function"] for t in TOOLS]}],
    "granite": [{}, {"tools": TOOLS}],
    "olmo2": [{}],
    "llama3": [{}, {"tools": TOOLS, "date_string": "26 Jul 2024"}],
}


def _digits_first(specials):
    """A StarCoder-style byte-level BPE (GGUF ``pre`` "refact"): digits split one by one,
    then GPT-2's split."""
    from tokenizers import Tokenizer as HF, decoders, models, pre_tokenizers, trainers
    tk = HF(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tk.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=600, special_tokens=specials, show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(LINES, tr)
    # a merge of two digits, which only a split that keeps digits together would use: what
    # tells this tokenizer from GPT-2's split
    d = json.loads(tk.to_str())
    d["model"]["vocab"]["12"] = max(d["model"]["vocab"].values()) + 1
    d["model"]["merges"].append(["1", "2"])
    return HF.from_str(json.dumps(d))


def make_dir(d, style):
    """tokenizer.json (trained here), tokenizer_config.json naming BOS and EOS, and the
    template where the family's checkpoints keep it."""
    template, bos, eos, specials, where = STYLES[style]
    pre, nfc = PRE.get(style, ("gpt-2", False))
    tk = (_digits_first(specials) if pre in DIGITS_FIRST_PRE_TOKENIZERS else
          _bytelevel(PRE_TOKENIZER_SPLITS.get(pre, _GPT2), specials, nfc))
    d.mkdir(parents=True)
    tk.save(str(d / "tokenizer.json"))
    cfg = {"eos_token": eos, "model_max_length": 4096}
    if bos is not None:
        cfg["bos_token"] = bos
    if where == "jinja":
        (d / "chat_template.jinja").write_text(template, encoding="utf-8")
    else:
        cfg["chat_template"] = template
    (d / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return tk


def write_gguf(path, d, tk, style):
    """The tokenizer metadata llama.cpp's converter writes for the directory ``d``
    (byte-level BPE: ``gpt2``, GPT-2's pre-tokenizer), its chat template included."""
    template, bos, eos, specials, _ = STYLES[style]
    vocab = tk.get_vocab(with_added_tokens=True)
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(PRE.get(style, ("gpt-2",))[0])
    w.add_token_list(tokens)
    merges = json.loads(tk.to_str())["model"]["merges"]
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    w.add_token_types([3 if t in specials else 1 for t in tokens])
    w.add_eos_token_id(vocab[eos])
    if bos is not None:
        w.add_bos_token_id(vocab[bos])
    w.add_add_bos_token(False)
    if style == "smollm3":  # SmolLM3Model.set_vocab drops the template's list slicing
        assert "[:]" in template
        template = template.replace("[:]", "")
    w.add_chat_template(template)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module", params=sorted(STYLES))
def family(request, tmp_path_factory):
    style = request.param
    d = tmp_path_factory.mktemp(style)
    tk = make_dir(d / "hf", style)
    write_gguf(d / "t.gguf", d / "hf", tk, style)
    return style, d


def test_family_templates_render_as_transformers_from_both_sources(family):
    style, d = family
    peer = transformers.AutoTokenizer.from_pretrained(str(d / "hf"))
    ours = {"tokenizer.json": blockc.Tokenizer.from_pretrained(d / "hf"),
            "gguf": blockc.Tokenizer.from_pretrained(d / "t.gguf")}
    seen = set()
    for msgs in CONVERSATIONS:
        for kw in VARIANTS[style]:
            for gen in (True, False):
                want = peer.apply_chat_template(msgs, add_generation_prompt=gen, tokenize=False,
                                                **kw)
                ids = peer.apply_chat_template(msgs, add_generation_prompt=gen, tokenize=True,
                                               return_dict=False, **kw)
                seen.add(want)
                for where, tok in ours.items():
                    got = tok.apply_chat_template(msgs, add_generation_prompt=gen, **kw)
                    assert got.text == want, (style, where, msgs, kw, gen)
                    assert got.ids.dtype == np.int64
                    assert got.ids.tolist() == list(ids), (style, where, msgs, kw, gen)
    # the variants change the text (the keywords reach the template)
    assert len(seen) >= len(CONVERSATIONS) * len(VARIANTS[style])


def test_tokenizers_encode_as_the_hf_tokenizer_from_both_sources(family):
    style, d = family
    peer = transformers.AutoTokenizer.from_pretrained(str(d / "hf"))
    ours = [blockc.Tokenizer.from_pretrained(d / "hf"), blockc.Tokenizer.from_pretrained(d / "t.gguf")]
    # and the directory's tokenizer as blockc's save_gguf writes it (its pre-tokenizer named)
    meta = metadata_of(ours[0])
    want_pre = {"qwen3": "qwen2", "llama3": "llama3", "granite": "starcoder"}.get(style, "gpt-2")
    assert meta["tokenizer.ggml.pre"].value == want_pre
    blockc.io.gguf.write(str(d / "saved.gguf"), {"general.architecture": "llama", **meta}, [])
    ours.append(blockc.Tokenizer.from_pretrained(d / "saved.gguf"))
    for text in STRINGS + ["x 12 3.14 1,000 and 007", STYLES[style][3][-1] + " 42"]:
        want = peer.encode(text, add_special_tokens=False)
        for tok in ours:
            assert tok.encode(text, add_special_tokens=False).tolist() == want, (style, text)
            assert tok.decode(want) == peer.decode(want), (style, text)


def test_thinking_switches_are_the_templates(family):
    style, d = family
    tok = blockc.Tokenizer.from_pretrained(d / "t.gguf")
    msgs = CONVERSATIONS[0]
    if style == "qwen3":
        assert tok.apply_chat_template(msgs, enable_thinking=False).text.endswith(
            "<|im_start|>assistant\n<think>\n\n</think>\n\n")
        assert tok.apply_chat_template(msgs).text.endswith("<|im_start|>assistant\n")
        # reasoning kept only after the last user query
        text = tok.apply_chat_template(CONVERSATIONS[2], add_generation_prompt=False).text
        assert "It is Paris" not in text and "<think>\nsmall\n</think>" in text
    elif style == "smollm3":
        assert "Reasoning Mode: /no_think" in tok.apply_chat_template(
            msgs, enable_thinking=False).text
        assert "Reasoning Mode: /no_think" in tok.apply_chat_template(CONVERSATIONS[3]).text
    elif style in ("olmo2", "llama3"):  # the template writes the BOS; the tokenizer adds none
        ids = tok.apply_chat_template(msgs).ids
        bos = tok.token_to_id(STYLES[style][1])
        assert ids[0] == bos and list(ids).count(bos) == 1
    else:
        text = tok.apply_chat_template(msgs, tools=TOOLS).text
        assert text.startswith("<|start_of_role|>system<|end_of_role|>Knowledge Cutoff Date")
        assert '<|start_of_role|>tools<|end_of_role|>[\n    {\n        "type": "function"' in text
