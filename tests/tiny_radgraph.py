"""A tiny random RadGraph model laid out exactly as the `radgraph` package caches its archives:
<cache>/<model_type>/{config.json, vocabulary/, weights.th}, with a tiny local BERT as encoder."""

from __future__ import annotations

import json
from pathlib import Path

NER = ["", "ANAT-DP", "OBS-DP", "OBS-U", "OBS-DA"]
RELATIONS = ["", "modify", "located_at", "suggestive_of"]


def tiny_radgraph(cache: Path, model_type: str = "radgraph-xl", seed: int = 0) -> Path:
    import torch
    from transformers import BertConfig, BertModel, BertTokenizer

    from tests.tiny_models import SPECIAL, WORDS

    bert = cache / "tiny-bert"
    bert.mkdir(parents=True, exist_ok=True)
    # allennlp's tokenizer wrapper tells special tokens apart by tokenizing "1" and "2"
    words = sorted({*WORDS, *"0123456789", "a", "b"})
    (bert / "vocab.txt").write_text("\n".join(SPECIAL + words) + "\n")
    tokenizer = BertTokenizer(str(bert / "vocab.txt"))
    torch.manual_seed(seed)
    BertModel(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=64)).save_pretrained(bert)
    tokenizer.save_pretrained(bert)

    model_dir = cache / model_type
    vocab = model_dir / "vocabulary"
    vocab.mkdir(parents=True, exist_ok=True)
    (vocab / "non_padded_namespaces.txt").write_text("*tags\n*labels\n")
    (vocab / f"{model_type}__ner_labels.txt").write_text("\n".join(NER) + "\n")
    (vocab / f"{model_type}__relation_labels.txt").write_text("\n".join(RELATIONS) + "\n")
    indexer = {"type": "pretrained_transformer_mismatched", "max_length": 512,
               "model_name": str(bert)}
    config = {
        "dataset_reader": {"type": "dygie", "max_span_width": 4,
                           "token_indexers": {"bert": indexer}},
        "model": {
            "type": "dygie", "embedder": {"token_embedders": {"bert": indexer}},
            "feature_size": 8, "max_span_width": 4, "target_task": "relation",
            "feedforward_params": {"num_layers": 1, "hidden_dims": 16, "dropout": 0.0},
            "loss_weights": {"ner": 1.0, "relation": 1.0, "coref": 0.0, "events": 0.0},
            "initializer": {}, "module_initializer": {},
            "modules": {
                "ner": {}, "relation": {"spans_per_word": 0.5},
                "coref": {"spans_per_word": 0.3, "max_antecedents": 10},
                "events": {"trigger_spans_per_word": 0.3, "argument_spans_per_word": 0.8,
                           "loss_weights": {"trigger": 1.0, "arguments": 0.5}},
            },
        },
    }
    (model_dir / "config.json").write_text(json.dumps(config, indent=2))
    torch.save(_build(model_dir, config).state_dict(), model_dir / "weights.th")
    return model_dir


def _build(model_dir: Path, config: dict):
    """DyGIE constructed the way radgraph.RadGraph constructs it, with random weights."""
    from radgraph.allennlp.data import Vocabulary
    from radgraph.allennlp.modules import text_field_embedders, token_embedders
    from radgraph.dygie.models import dygie

    vocab = Vocabulary.from_files(str(model_dir / "vocabulary"), None, None)
    bert = config["model"]["embedder"]["token_embedders"]["bert"]
    embedder = text_field_embedders.BasicTextFieldEmbedder({"bert": (
        token_embedders.PretrainedTransformerMismatchedEmbedder(
            model_name=bert["model_name"], max_length=bert["max_length"]))})
    params = {k: v for k, v in config["model"].items()
              if k not in ("type", "embedder", "initializer", "module_initializer")}
    return dygie.DyGIE(vocab=vocab, embedder=embedder, **json.loads(json.dumps(params)))
