"""Issue 50's Gemma 2/3, Phi-3/3.5, Phi-4-mini and Mixtral tokenizers and chat templates,
from the checkpoint directory (tokenizer.json + tokenizer_config.json) and from the GGUF
metadata llama.cpp's converter writes for them (``tokenizer.ggml.*`` and
``tokenizer.chat_template``, with the gguf package's writer), against transformers'
PreTrainedTokenizerFast on the directory: the same ids on varied text, the same rendered
prompt and ids from apply_chat_template, and generation stopping on the end-of-turn token.

The tokenizers are trained here on a few lines (nothing downloaded), built as the
families' tokenizer.json files are:

- Gemma: SentencePiece-style BPE with byte fallback, spaces replaced by ``▁`` with no
  prefix (GGUF ``model`` "llama", scores and token types, ``add_space_prefix`` false,
  ``general.architecture`` "gemma2"/"gemma3"), ``<start_of_turn>``/``<end_of_turn>``;
- Phi-3 and Mixtral: Llama 2's (``Prepend("▁")`` and ``Replace(" ", "▁")`` normalizers,
  byte fallback; GGUF "llama" with its default space prefix), Phi-3's chat tokens
  stripping the whitespace after them (tokenizer.json's ``rstrip``; llama.cpp's rule for a
  file named Phi-3), Mixtral's ``[INST]`` plain text;
- Phi-4-mini: byte-level BPE split by GPT-4o's pattern (GGUF "gpt2", ``pre`` "gpt-4o").

The templates (tests/support/family_templates.py) use the published ones' constructs."""
import json

import numpy as np
import pytest

import blockc
from blockc.generation.ends import end_token_ids
from blockc.text.gguf import PRE_TOKENIZER_SPLITS, metadata_of
from family_templates import GEMMA3, MIXTRAL, PHI3, PHI4_MINI
from test_tokenizer_families import LINES, STRINGS, _bytelevel

pytest.importorskip("jinja2")
tokenizers = pytest.importorskip("tokenizers")
gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

CHAT_LINES = LINES + ["<|user|>\nHello there<|end|>\n<|assistant|>\nHi! [INST] [/INST]",
                      "You are terse. What is the capital of France? Paris is."]

#: family -> (architecture, template, bos, eos, end of turn, control tokens, GGUF general.name,
#: generation_config.json's eos_token_id as token texts, as the published checkpoints list)
FAMILIES = {
    "gemma2": ("gemma2", GEMMA3, "<bos>", "<eos>", "<end_of_turn>",
               ["<start_of_turn>", "<end_of_turn>"], "Gemma 2 2b It", ["<eos>", "<end_of_turn>"]),
    "gemma3": ("gemma3", GEMMA3, "<bos>", "<eos>", "<end_of_turn>",
               ["<start_of_turn>", "<end_of_turn>"], "Gemma 3 1b It", ["<eos>", "<end_of_turn>"]),
    "phi3": ("phi3", PHI3, "<s>", "<|endoftext|>", "<|end|>",
             ["<|endoftext|>", "<|assistant|>", "<|system|>", "<|end|>", "<|user|>"],
             "Phi-3.5-mini-instruct", ["<|endoftext|>", "<|assistant|>", "<|end|>"]),
    "phi4mini": ("phi3", PHI4_MINI, None, "<|endoftext|>", "<|end|>",
                 ["<|endoftext|>", "<|assistant|>", "<|end|>", "<|system|>", "<|user|>",
                  "<|tool|>", "<|/tool|>"], "Phi 4 Mini Instruct", ["<|end|>", "<|endoftext|>"]),
    "mixtral": ("llama", MIXTRAL, "<s>", "</s>", "</s>", [], "Mixtral 8x7B Instruct v0.1",
                ["</s>"]),
}

TOOLS = json.dumps([{"name": "get_weather", "description": "The weather in a city",
                     "parameters": {"city": {"type": "str"}}}])

CONVERSATIONS = [
    [{"role": "user", "content": "Hello! How are you today?"}],
    [{"role": "system", "content": "You are terse."},
     {"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Be brief."},
     {"role": "user", "content": "  What is the capital of France?\n"},
     {"role": "assistant", "content": "Paris is the capital. 🙂"},
     {"role": "user", "content": "naïve café: <b>bold</b> & 'quotes' 1234567  "}],
]


def _sentencepiece(family, specials, bos, eos):
    """A SentencePiece-style BPE with byte fallback: Gemma's (no prefix space) or Llama 2's
    (a ``▁`` prepended to each piece of text), its chat tokens added as special tokens
    (Phi-3's stripping the whitespace after them, as its tokenizer.json says)."""
    from tokenizers import AddedToken, Tokenizer as HF, decoders, models, normalizers, trainers
    gemma = family.startswith("gemma")
    tk = HF(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    if gemma:
        tk.normalizer = normalizers.Replace(" ", "▁")
        tk.pre_tokenizer = tokenizers.pre_tokenizers.Split(" ", behavior="merged_with_previous")
        tk.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                        decoders.Fuse()])
        base = ["<pad>", eos, bos, "<unk>"]
    else:
        tk.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                              normalizers.Replace(" ", "▁")])
        tk.pre_tokenizer = tokenizers.pre_tokenizers.Split("▁", behavior="merged_with_next")
        tk.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                        decoders.Fuse(), decoders.Strip(" ", 1, 0)])
        base = ["<unk>", bos, eos]
    alphabet = sorted({c for line in CHAT_LINES for c in line.replace(" ", "▁")} | {"▁"})
    tr = trainers.BpeTrainer(vocab_size=800, special_tokens=base + [
        f"<0x{b:02X}>" for b in range(256)], initial_alphabet=alphabet, show_progress=False)
    tk.train_from_iterator(CHAT_LINES, tr)
    # a merge-free run: the pre-tokenizer used for training only (theirs split nothing)
    tk.pre_tokenizer = None
    if family == "mixtral":  # Llama 2's: <s> before the text when special tokens are asked
        tk.post_processor = tokenizers.processors.TemplateProcessing(
            single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
            special_tokens=[(bos, tk.token_to_id(bos))])
    rstrip = family == "phi3"
    tk.add_special_tokens([AddedToken(t, normalized=False, special=True,
                                      rstrip=rstrip and t not in ("<|endoftext|>",))
                           for t in specials if t not in base])
    return tk


def _tokens(tk):
    v = tk.get_vocab(with_added_tokens=True)
    tokens = [None] * len(v)
    for t, i in v.items():
        tokens[i] = t
    return tokens


def make_dir(d, family):
    arch, template, bos, eos, eot, specials, name, gen_eos = FAMILIES[family]
    if family == "phi4mini":
        tk = _bytelevel(PRE_TOKENIZER_SPLITS["gpt-4o"], specials)
    else:
        tk = _sentencepiece(family, specials, bos, eos)
    d.mkdir(parents=True)
    tk.save(str(d / "tokenizer.json"))
    cfg = {"eos_token": eos, "chat_template": template, "model_max_length": 4096,
           "add_bos_token": family == "mixtral", "add_eos_token": False}
    if bos is not None:
        cfg["bos_token"] = bos
    if family != "phi4mini":
        cfg["unk_token"] = "<unk>"
    (d / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    vocab = tk.get_vocab(with_added_tokens=True)
    (d / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": [vocab[t] for t in gen_eos]}), encoding="utf-8")
    return tk


def write_gguf(path, d, tk, family):
    """The tokenizer metadata llama.cpp's converter writes for the directory: a
    SentencePiece vocabulary as ``llama`` (tokens, scores by the pieces' rank, types:
    NORMAL 1, UNKNOWN 2, CONTROL 3, BYTE 6; no merges), Phi-4-mini's as ``gpt2``; BOS, EOS,
    UNK ids and add_bos_token from tokenizer_config.json; no end-of-turn id (the converter
    writes none for these: llama.cpp finds it by its text)."""
    arch, template, bos, eos, eot, specials, name, _ = FAMILIES[family]
    tokens = _tokens(tk)
    vocab = {t: i for i, t in enumerate(tokens)}
    special = {a.content for a in tk.get_added_tokens_decoder().values() if a.special}
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    if family == "phi4mini":
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("gpt-4o")
        w.add_token_list(tokens)
        merges = json.loads(tk.to_str())["model"]["merges"]
        w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
        w.add_token_types([3 if t in special else 1 for t in tokens])
    else:
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list([t.replace("▁", " ") if family.startswith("gemma") and t and
                          not t.replace("▁", "") else t for t in tokens])
        w.add_token_scores([0.0 if t in special or t.startswith("<0x") else -float(i)
                            for i, t in enumerate(tokens)])
        w.add_token_types([2 if t == "<unk>" else 3 if t in special else 6 if len(t) == 6
                           and t.startswith("<0x") else 1 for t in tokens])
        w.add_unk_token_id(vocab["<unk>"])
        if family.startswith("gemma"):
            w.add_add_space_prefix(False)
    if bos is not None:
        w.add_bos_token_id(vocab[bos])
    w.add_eos_token_id(vocab[eos])
    w.add_add_bos_token(family == "mixtral")
    w.add_add_eos_token(False)
    w.add_chat_template(template)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    name = request.param
    d = tmp_path_factory.mktemp(name)
    tk = make_dir(d / "hf", name)
    write_gguf(d / "t.gguf", d / "hf", tk, name)
    peer = transformers.AutoTokenizer.from_pretrained(str(d / "hf"))
    ours = {"tokenizer.json": blockc.Tokenizer.from_pretrained(d / "hf"),
            "gguf": blockc.Tokenizer.from_pretrained(d / "t.gguf")}
    return name, d, peer, ours


def _variants(name):
    if name == "phi4mini":  # tools in the system turn, as a JSON string
        return [{}, {"tools": TOOLS}]
    if name.startswith("gemma"):  # content as a list of text parts
        return [{}, {"parts": True}]
    return [{}]


def _conversation(msgs, variant):
    if variant.get("tools"):
        msgs = [{"role": "system", "content": "You have tools.", "tools": variant["tools"]}] + [
            m for m in msgs if m["role"] != "system"]
    if variant.get("parts"):
        msgs = [{**m, "content": [{"type": "text", "text": m["content"]}]} for m in msgs]
    return msgs


def test_tokenizers_encode_as_transformers_from_both_sources(family):
    name, d, peer, ours = family
    specials = FAMILIES[name][5] or ["</s>"]
    texts = STRINGS + [" leading", "x 12 3.14 1,000 and 007", "\x01\x02 bytes \u2603\U0001f9ea",
                       f"a{specials[-1]}\nb {specials[0]}  c", "[INST] hi [/INST]"]
    # and the directory's tokenizer as blockc writes it into a GGUF file (save_gguf's metadata)
    meta = metadata_of(ours["tokenizer.json"])
    assert meta["tokenizer.ggml.model"].value == ("gpt2" if name == "phi4mini" else "llama")
    if name != "phi4mini":
        assert meta["tokenizer.ggml.add_space_prefix"].value == (not name.startswith("gemma"))
    blockc.io.gguf.write(str(d / "saved.gguf"), {
        "general.architecture": FAMILIES[name][0], "general.name": FAMILIES[name][6], **meta}, [])
    ours = {**ours, "saved": blockc.Tokenizer.from_pretrained(d / "saved.gguf")}
    for text in texts:
        want = peer.encode(text, add_special_tokens=False)
        for where, tok in ours.items():
            assert tok.encode(text, add_special_tokens=False).tolist() == want, (name, where, text)
            assert tok.decode(want) == peer.decode(want), (name, where, text)
        with_specials = peer.encode(text)
        assert ours["gguf"].encode(text).tolist() == with_specials, (name, text)
    # byte fallback: a character the training never saw is its UTF-8 bytes' tokens
    if name != "phi4mini":
        ids = ours["gguf"].encode("\u2603", add_special_tokens=False).tolist()
        assert [peer.convert_ids_to_tokens(i) for i in ids][-3:] == ["<0xE2>", "<0x98>", "<0x83>"]
    assert ours["gguf"].vocab_size == len(peer)


def test_chat_templates_render_as_transformers_from_both_sources(family):
    name, d, peer, ours = family
    seen = set()
    for msgs in CONVERSATIONS:
        for variant in _variants(name):
            conv = _conversation(msgs, variant)
            for gen in (True, False):
                want = peer.apply_chat_template(conv, add_generation_prompt=gen, tokenize=False)
                ids = peer.apply_chat_template(conv, add_generation_prompt=gen, tokenize=True,
                                               return_dict=False)
                seen.add(want)
                for where, tok in ours.items():
                    got = tok.apply_chat_template(conv, add_generation_prompt=gen)
                    assert got.text == want, (name, where, conv, gen)
                    assert got.ids.dtype == np.int64
                    assert got.ids.tolist() == list(ids), (name, where, conv, gen)
    # Gemma's list-of-parts content renders as its string; Phi-4-mini's tools change the text;
    # Mixtral's template has no generation prompt
    assert len(seen) == len(CONVERSATIONS) * {"phi4mini": 4, "mixtral": 1}.get(name, 2)
    text = ours["gguf"].apply_chat_template(CONVERSATIONS[1]).text
    if name.startswith("gemma"):  # the system message folded into the first user turn
        assert text == ("<bos><start_of_turn>user\nYou are terse.\n\nWhat is the capital of "
                        "France?<end_of_turn>\n<start_of_turn>model\n")
    elif name == "phi3":
        assert text == ("<|system|>\nYou are terse.<|end|>\n<|user|>\nWhat is the capital of "
                        "France?<|end|>\n<|assistant|>\n")
    elif name == "phi4mini":
        tools = ours["gguf"].apply_chat_template(_conversation(CONVERSATIONS[0],
                                                              {"tools": TOOLS})).text
        assert tools.startswith("<|system|>You have tools.<|tool|>[{\"name\": \"get_weather\"")
        assert text == ("<|system|>You are terse.<|end|><|user|>What is the capital of "
                        "France?<|end|><|assistant|>")
    else:
        assert text == "<s> [INST] You are terse.\n\nWhat is the capital of France? [/INST]"


def test_roles_out_of_turn_are_refused_as_transformers_refuses_them(family):
    name, d, peer, ours = family
    if name not in ("gemma2", "gemma3", "mixtral"):
        pytest.skip("the Phi templates do not check the roles' order")
    msgs = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(Exception, match="alternate"):
        peer.apply_chat_template(msgs, tokenize=False)
    for tok in ours.values():
        with pytest.raises(Exception, match="alternate"):
            tok.apply_chat_template(msgs)


def test_generation_stops_on_the_end_of_turn_token(family):
    name, d, peer, ours = family
    eos, eot = FAMILIES[name][3], FAMILIES[name][4]
    want = {peer.convert_tokens_to_ids(eos), peer.convert_tokens_to_ids(eot)}
    for where, path in (("tokenizer.json", d / "hf"), ("gguf", d / "t.gguf")):
        tok = ours[where]
        got = end_token_ids(path, tok)
        assert want <= got, (name, where, got)
        # and nothing a reply is made of: only special tokens end it
        assert all(peer.convert_ids_to_tokens(i) in peer.all_special_tokens + FAMILIES[name][5]
                   for i in got), (name, where, got)
