"""Gemma 3's image-text checkpoints (``model_type`` ``gemma3``, what the 4B, 12B and 27B
publish): blockc runs their language model on text, as llama.cpp runs the text GGUF of
such a model. A tiny random ``Gemma3ForConditionalGeneration`` made by transformers
(nothing downloaded), its logits on a text prompt past the sliding window within 1e-4 of
transformers', 12 greedy tokens identical; its vision tower is not loaded, any other
tensor and a malformed text_config are refused by name."""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from safetensors.numpy import load_file, save_file  # noqa: E402
from transformers import Gemma3Config, Gemma3ForConditionalGeneration  # noqa: E402

from blockc import GPT, GPTConfig  # noqa: E402
from test_families_new import V, check_against  # noqa: E402

TEXT = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            query_pre_attn_scalar=16, sliding_window=12, max_position_embeddings=64,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            pad_token_id=0, bos_token_id=1, eos_token_id=2)
VISION = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2,
              image_size=28, patch_size=14)


def wrapped(path, seed=0):
    torch.manual_seed(seed)
    cfg = Gemma3Config(text_config=TEXT, vision_config=VISION, mm_tokens_per_image=4,
                       image_token_index=V + 5, boi_token_index=V + 3, eoi_token_index=V + 4)
    hm = Gemma3ForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # norms away from 1 (Gemma's are 0: 1 + w), weights larger
        for p in hm.parameters():
            p.add_(torch.randn_like(p) * (0.3 if p.ndim == 1 else 0.1))
    hm.save_pretrained(path)
    return hm


def test_the_language_model_matches_transformers(tmp_path):
    hm = wrapped(tmp_path)
    names = load_file(str(tmp_path / "model.safetensors"))
    assert any(n.startswith("vision_tower.") for n in names)  # the file has both parts
    m = GPT.from_pretrained(tmp_path)
    text = hm.model.language_model
    assert m.num_parameters() == sum(p.numel() for p in text.parameters())
    assert (m.config.sliding_window, m.config.sliding_layers) == (12, (True, False, True))
    assert m.config == GPTConfig.from_hf(json.loads((tmp_path / "config.json").read_text()))
    check_against(hm, m)  # 40 positions, past the window; 12 greedy tokens
    # saved back as the language model alone, which transformers loads as Gemma 3 text
    m.save_pretrained(tmp_path / "text")
    assert json.loads((tmp_path / "text" / "config.json").read_text())["model_type"] == \
        "gemma3_text"
    np.testing.assert_array_equal(GPT.from_pretrained(tmp_path / "text").params, m.params)


def test_other_tensors_and_bad_configs_are_refused(tmp_path):
    wrapped(tmp_path)
    f = tmp_path / "model.safetensors"
    tensors = load_file(str(f))
    save_file({**tensors, "audio_tower.w": np.zeros(2, np.float32)}, str(f),
              metadata={"format": "pt"})
    with pytest.raises(ValueError, match="'audio_tower.w' is neither the language model's"):
        GPT.from_pretrained(tmp_path)
    save_file(tensors, str(f), metadata={"format": "pt"})
    cfg = json.loads((tmp_path / "config.json").read_text())
    for text, match in ((None, "text_config must be an object"),
                        ({**cfg["text_config"], "model_type": "gemma3"}, "wraps another"),
                        ({**cfg["text_config"], "model_type": "phi"}, "'phi' is not one")):
        (tmp_path / "config.json").write_text(json.dumps({**cfg, "text_config": text}))
        with pytest.raises(ValueError, match=match):
            GPT.from_pretrained(tmp_path)
