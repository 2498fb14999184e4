"""Tiny random models of the metric architectures, saved as the real ones are laid out, so tests
load them through the metrics' own code paths (no network)."""

from __future__ import annotations

import json
from pathlib import Path


def tiny_roberta(path: Path, seed: int = 0, layers: int = 6) -> Path:
    """A RoBERTa (the distilroberta-base architecture: RobertaModel + byte-level BPE tokenizer)
    with a byte-only vocabulary, so any text, unicode included, encodes."""
    import torch
    from transformers import RobertaConfig, RobertaModel, RobertaTokenizer
    from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode

    path.mkdir(parents=True, exist_ok=True)
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    vocab = {tok: i for i, tok in enumerate(specials + sorted(set(bytes_to_unicode().values())))}
    (path / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (path / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    tokenizer = RobertaTokenizer(str(path / "vocab.json"), str(path / "merges.txt"))
    torch.manual_seed(seed)
    config = RobertaConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=layers,
                           num_attention_heads=2, intermediate_size=32,
                           max_position_embeddings=600, pad_token_id=1, bos_token_id=0,
                           eos_token_id=2)
    RobertaModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def baseline_tsv(path: Path, layers: int, seed: int = 0) -> Path:
    """A rescaling baseline in bert-score's format (LAYER,P,R,F; one row per layer)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = ["LAYER,P,R,F"] + [f"{i}," + ",".join(f"{v:.6f}" for v in rng.uniform(0.5, 0.9, 3))
                              for i in range(layers + 1)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


RATE_TYPES = ("ABNORMALITY", "NON-ABNORMALITY", "DISEASE", "NON-DISEASE", "ANATOMY")


def tiny_rate_models(path: Path, seed: int = 0) -> tuple[Path, Path]:
    """RaTEScore's two models in miniature: a BERT token classifier with its B-/I- entity labels
    (for RaTE-NER) and a BERT encoder (for BioLORD's [CLS] embeddings), WordPiece tokenizers."""
    import torch
    from transformers import BertConfig, BertForTokenClassification, BertModel, BertTokenizer

    from tests.tiny_models import SPECIAL, WORDS

    labels = ["O"] + [f"{p}-{t}" for t in RATE_TYPES for p in ("B", "I")]
    folders = []
    for name in ("ner", "eval"):
        folder = path / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "vocab.txt").write_text("\n".join(SPECIAL + sorted(set(WORDS))) + "\n")
        tokenizer = BertTokenizer(str(folder / "vocab.txt"))
        config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=16,
                            num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                            id2label=dict(enumerate(labels)),
                            label2id={label: i for i, label in enumerate(labels)})
        torch.manual_seed(seed)
        model = BertForTokenClassification(config) if name == "ner" else BertModel(config)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        folders.append(folder)
    return folders[0], folders[1]
