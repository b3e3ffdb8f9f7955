"""Tiny Hugging Face transformers models, built from configs (nothing is downloaded): hidden
size 32, 2 layers, 4 heads, vocabulary 99, weights from ``torch.manual_seed``.

Each family is wrapped in a module whose ``forward`` takes plain tensors under the ONNX input
names and returns a tuple of tensors, so both exporters see one signature. Weights are drawn
with a larger initializer range than the default 0.02 so attention is not near-uniform and a
wrong mask or rotary embedding shows in the outputs.

``attention`` picks transformers' attention code: the default ("sdpa") is what a user gets;
"eager" is the one onnxruntime's transformer optimizer recognises (its Attention fusion does
not match the sdpa graph), and the one T5 needs for the dynamo exporter (see the doc).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from specs import EXPORT_BATCH, EXPORT_SEQ, RUN_BATCH, RUN_SEQ, Spec, image_spec, rng

SEED = 0
VOCAB, HIDDEN, LAYERS, HEADS, FFN = 99, 32, 2, 4, 37  # special token ids are set inside VOCAB
INIT = 0.2
PAST_EXPORT, PAST_RUN, STEP_EXPORT, STEP_RUN = 5, 7, 3, 2  # GPT-2 with a cache: past and new tokens


def _seeded(make: Callable[[], Any]) -> Any:
    torch.manual_seed(SEED)
    return make().eval()


def _ids(batch: int, seq: int) -> np.ndarray:
    return rng().integers(0, VOCAB, (batch, seq)).astype(np.int64)


def _mask(batch: int, seq: int, pad_row: bool) -> np.ndarray:
    """All ones; with ``pad_row`` the second row's last three tokens are padding."""
    mask = np.ones((batch, seq), np.int64)
    if pad_row and batch > 1:
        mask[1, -3:] = 0
    return mask


def _text_example(with_types: bool) -> tuple[torch.Tensor, ...]:
    ids = torch.from_numpy(_ids(EXPORT_BATCH, EXPORT_SEQ))
    mask = torch.ones(EXPORT_BATCH, EXPORT_SEQ, dtype=torch.int64)
    return (ids, mask, torch.zeros_like(ids)) if with_types else (ids, mask)


def _text_feeds(with_types: bool) -> dict[str, np.ndarray]:
    feeds = {"input_ids": _ids(RUN_BATCH, RUN_SEQ), "attention_mask": _mask(RUN_BATCH, RUN_SEQ, True)}
    if with_types:
        types = np.zeros((RUN_BATCH, RUN_SEQ), np.int64)
        types[:, RUN_SEQ // 2:] = 1
        feeds["token_type_ids"] = types
    return feeds


def _text_spec(module: Callable[[], torch.nn.Module], outputs: tuple[str, ...], with_types: bool) -> Spec:
    names = ("input_ids", "attention_mask", "token_type_ids")[:3 if with_types else 2]
    return Spec(module, lambda: _text_example(with_types), names, outputs,
                {name: {0: "batch", 1: "sequence"} for name in names}, lambda: _text_feeds(with_types))


# --------------------------------------------------------------------------- wrappers


class BertEncoder(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return out.last_hidden_state, out.pooler_output


class BertClassifier(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits


class CausalLM(torch.nn.Module):
    """A decoder without a cache: logits for every position."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


class CausalLMWithPast(torch.nn.Module):
    """A two-layer decoder step: past keys/values in, logits and the grown keys/values out
    (transformers' DynamicCache, filled from and flattened to plain tensors)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, past_0_key: torch.Tensor,
                past_0_value: torch.Tensor, past_1_key: torch.Tensor,
                past_1_value: torch.Tensor) -> tuple[torch.Tensor, ...]:
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        cache.update(past_0_key, past_0_value, 0)
        cache.update(past_1_key, past_1_value, 1)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, use_cache=True)
        present = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
        return (out.logits, *present)


class T5Encoder(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class VisionEncoder(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model(pixel_values=pixel_values)
        return out.last_hidden_state, out.pooler_output


class AudioClassifier(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_features: torch.Tensor) -> torch.Tensor:
        return self.model(input_features=input_features).logits


# --------------------------------------------------------------------------- families


def bert(attention: str = "sdpa") -> Spec:
    """BertModel: last hidden state and pooler output."""
    import transformers as tr

    def make() -> torch.nn.Module:
        cfg = tr.BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                            intermediate_size=FFN, max_position_embeddings=64, initializer_range=INIT,
                            attn_implementation=attention)
        return _seeded(lambda: BertEncoder(tr.BertModel(cfg)))

    return _text_spec(make, ("last_hidden_state", "pooler_output"), with_types=True)


def bert_classifier(attention: str = "eager") -> Spec:
    """BertForSequenceClassification (3 labels): logits."""
    import transformers as tr

    def make() -> torch.nn.Module:
        cfg = tr.BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                            intermediate_size=FFN, max_position_embeddings=64, initializer_range=INIT, num_labels=3,
                            attn_implementation=attention)
        return _seeded(lambda: BertClassifier(tr.BertForSequenceClassification(cfg)))

    return _text_spec(make, ("logits",), with_types=True)


def _gpt2_config(attention: str) -> Any:
    import transformers as tr

    return tr.GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=64,
                         initializer_range=INIT, bos_token_id=1, eos_token_id=2, attn_implementation=attention)


def gpt2(attention: str = "sdpa") -> Spec:
    """GPT2LMHeadModel without a cache: logits."""
    import transformers as tr

    return _text_spec(lambda: _seeded(lambda: CausalLM(tr.GPT2LMHeadModel(_gpt2_config(attention)))),
                      ("logits",), with_types=False)


def gpt2_with_past(attention: str = "sdpa") -> Spec:
    """GPT2LMHeadModel, one decoding step with past keys/values (use_cache): logits and presents."""
    import transformers as tr

    head_dim = HIDDEN // HEADS
    pasts = tuple(f"past_{layer}_{kind}" for layer in range(LAYERS) for kind in ("key", "value"))
    presents = tuple(name.replace("past", "present") for name in pasts)

    def tensors(batch: int, step: int, past: int) -> dict[str, np.ndarray]:
        gen = rng()
        feeds = {"input_ids": gen.integers(0, VOCAB, (batch, step)).astype(np.int64),
                 "attention_mask": np.ones((batch, past + step), np.int64)}
        if batch > 1:
            feeds["attention_mask"][1, :2] = 0  # the second row's first past tokens are padding
        for name in pasts:
            feeds[name] = gen.standard_normal((batch, HEADS, past, head_dim)).astype(np.float32)
        return feeds

    def example() -> tuple[torch.Tensor, ...]:
        feeds = tensors(EXPORT_BATCH, STEP_EXPORT, PAST_EXPORT)
        feeds["attention_mask"][:] = 1
        return tuple(torch.from_numpy(v) for v in feeds.values())

    dynamic = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "total_sequence"}}
    dynamic.update({name: {0: "batch", 2: "past_sequence"} for name in pasts})
    return Spec(lambda: _seeded(lambda: CausalLMWithPast(tr.GPT2LMHeadModel(_gpt2_config(attention)))), example,
                ("input_ids", "attention_mask", *pasts), ("logits", *presents), dynamic,
                lambda: tensors(RUN_BATCH, STEP_RUN, PAST_RUN))


def t5_encoder(attention: str = "eager") -> Spec:
    """T5EncoderModel (relative position buckets, RMS norm, ReLU feed-forward): last hidden state."""
    import transformers as tr

    def make() -> torch.nn.Module:
        cfg = tr.T5Config(vocab_size=VOCAB, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=FFN, num_layers=LAYERS,
                          num_heads=HEADS, relative_attention_num_buckets=8, initializer_factor=INIT * 5,
                          attn_implementation=attention)
        return _seeded(lambda: T5Encoder(tr.T5EncoderModel(cfg)))

    return _text_spec(make, ("last_hidden_state",), with_types=False)


def vit(attention: str = "sdpa") -> Spec:
    """ViTModel on 16x16 images in 4x4 patches: last hidden state and pooler output."""
    import transformers as tr

    def make() -> torch.nn.Module:
        cfg = tr.ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                           num_attention_heads=HEADS, intermediate_size=FFN, initializer_range=INIT,
                           attn_implementation=attention)
        return _seeded(lambda: VisionEncoder(tr.ViTModel(cfg)))

    return image_spec(make, (3, 16, 16), ("last_hidden_state", "pooler_output"), name="pixel_values")


def whisper(attention: str = "sdpa") -> Spec:
    """WhisperForAudioClassification (Whisper's encoder, mean-pooled, a classifier): logits for
    16 mel bins x 40 frames (the encoder's fixed input length)."""
    import transformers as tr

    def make() -> torch.nn.Module:
        cfg = tr.WhisperConfig(vocab_size=VOCAB, num_mel_bins=16, d_model=HIDDEN, encoder_layers=LAYERS,
                               encoder_attention_heads=HEADS, decoder_layers=LAYERS, decoder_attention_heads=HEADS,
                               encoder_ffn_dim=FFN, decoder_ffn_dim=FFN, max_source_positions=20, num_labels=3,
                               init_std=INIT, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                               decoder_start_token_id=3, attn_implementation=attention)
        return _seeded(lambda: AudioClassifier(tr.WhisperForAudioClassification(cfg)))

    return image_spec(make, (16, 40), ("logits",), name="input_features")


def llama(attention: str = "sdpa") -> Spec:
    """LlamaForCausalLM (rotary embeddings, RMS norm, SwiGLU, 2 key/value heads for 4 query
    heads) without a cache: logits."""
    import transformers as tr

    def make() -> torch.nn.Module:
        cfg = tr.LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=48, num_hidden_layers=LAYERS,
                             num_attention_heads=HEADS, num_key_value_heads=2, max_position_embeddings=64,
                             initializer_range=INIT, attn_implementation=attention)
        return _seeded(lambda: CausalLM(tr.LlamaForCausalLM(cfg)))

    return _text_spec(make, ("logits",), with_types=False)
