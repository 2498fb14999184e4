"""Tiny random models of the real drafting architectures, saved with `save_pretrained` so tests
and benchmarks load them through exactly the code path a hub id takes (no network)."""

from __future__ import annotations

from pathlib import Path

WORDS = (
    "the", "lungs", "are", "clear", ".", "no", "pleural", "effusion", "or", "pneumothorax",
    "heart", "size", "is", "normal", "mediastinal", "contours", "within", "limits", "there",
    "mild", "cardiomegaly", "small", "left", "right", "basilar", "atelectasis", "opacity",
    "consolidation", "pulmonary", "edema", "stable", "unchanged", "compared", "to", "prior",
    "findings", "impression", ":", "acute", "cardiopulmonary", "process", "bibasilar",
    "scarring",
)
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def tiny_encoder_decoder(path: Path, seed: int = 0, image_size: int = 32, hidden: int = 32,
                         layers: int = 2) -> Path:
    """ViT encoder + BERT decoder with cross-attention and a small WordPiece vocabulary, laid out
    like the RRG24 ViLMedic baselines (decoding starts at [CLS], ends at [SEP])."""
    import torch
    from transformers import (
        BertConfig,
        BertLMHeadModel,
        BertTokenizer,
        VisionEncoderDecoderModel,
        ViTConfig,
        ViTImageProcessor,
        ViTModel,
    )

    path.mkdir(parents=True, exist_ok=True)
    vocab = path / "vocab.txt"
    vocab.write_text("\n".join(SPECIAL + sorted(set(WORDS))) + "\n")
    tokenizer = BertTokenizer(str(vocab))
    torch.manual_seed(seed)
    encoder = ViTModel(ViTConfig(image_size=image_size, patch_size=8, hidden_size=hidden,
                                 num_hidden_layers=layers, num_attention_heads=2,
                                 intermediate_size=2 * hidden))
    decoder = BertLMHeadModel(BertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=hidden, num_hidden_layers=layers,
        num_attention_heads=2, intermediate_size=2 * hidden, is_decoder=True,
        add_cross_attention=True, max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id))
    model = VisionEncoderDecoderModel(encoder=encoder, decoder=decoder)
    model.config.decoder_start_token_id = tokenizer.cls_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.config.eos_token_id = tokenizer.sep_token_id
    model.config.bos_token_id = tokenizer.cls_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    ViTImageProcessor(size={"height": image_size, "width": image_size}).save_pretrained(path)
    return path


CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: "
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<image> {% else %}{{ c['text'] }}{% endif %}{% endfor %}"
    "{% endif %}\n{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}"
)


def tiny_llava(path: Path, seed: int = 0) -> Path:
    """A LLaVA-class chat VLM (CLIP vision tower + Llama text model) with a word-level tokenizer
    and a chat template, loadable with AutoModelForImageTextToText + AutoProcessor."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
        PreTrainedTokenizerFast,
    )

    path.mkdir(parents=True, exist_ok=True)
    specials = ["<pad>", "<unk>", "<s>", "</s>", "<image>"]
    vocab = {w: i for i, w in enumerate(specials + sorted({*WORDS, "FINDINGS", "IMPRESSION"}))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>",
                                        pad_token="<pad>", unk_token="<unk>",
                                        extra_special_tokens={"image_token": "<image>"})
    image_processor = CLIPImageProcessor(size={"shortest_edge": 32},
                                         crop_size={"height": 32, "width": 32})
    processor = LlavaProcessor(image_processor=image_processor, tokenizer=tokenizer, patch_size=8,
                               vision_feature_select_strategy="default",
                               chat_template=CHAT_TEMPLATE, num_additional_image_tokens=1)
    torch.manual_seed(seed)
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(image_size=32, patch_size=8, hidden_size=32,
                                       intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=2, projection_dim=32),
        text_config=LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64,
                                num_hidden_layers=2, num_attention_heads=2,
                                num_key_value_heads=2, max_position_embeddings=512,
                                pad_token_id=vocab["<pad>"], bos_token_id=vocab["<s>"],
                                eos_token_id=vocab["</s>"]),
        image_token_index=vocab["<image>"], vision_feature_select_strategy="default",
        vision_feature_layer=-1, image_seq_length=16)
    model = LlavaForConditionalGeneration(config)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path
