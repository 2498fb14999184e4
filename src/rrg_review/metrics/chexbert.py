"""F1-CheXbert: the CheXbert labeler (BERT-base + 14 heads, `chexbert.pth` from
StanfordAIMI/RRG_scorers) labels hypothesis and reference; F1 over the labels.

Our own module with the original architecture and state-dict layout (the `f1chexbert` package
downloads from the hub at construction and cannot take local paths). As in RRG24 scoring, a
positive or uncertain prediction counts as 1 (blank and negative as 0). Keys:
`chexbert_5_micro_f1`, `chexbert_all_micro_f1`, `chexbert_5_macro_f1`, `chexbert_all_macro_f1`
(5 = Cardiomegaly, Edema, Consolidation, Atelectasis, Pleural Effusion). Macro F1 counts a label
with no positives in either labels as 0 (scikit-learn's zero_division=0). Reports longer than 512
tokens keep their first 511 tokens plus [SEP], as the original labeler does; an empty report is
[CLS][SEP]. Per-sample values are the example-level F1 of that pair's labels (1.0 when both are
all-negative).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np

from rrg_review.metrics.base import Metric, ModelMetric, Payload
from rrg_review.metrics.store import METRICS

if TYPE_CHECKING:
    from rrg_review.metrics.config import MetricConfig

if TYPE_CHECKING:  # torch and transformers load only when the metric runs
    import torch
    from torch import nn
    from transformers import PretrainedConfig, PreTrainedTokenizerBase

# what a batch of token ids and their mask become: one row per text
Head = Callable[["nn.Module", "torch.Tensor", "torch.Tensor"], np.ndarray]

CONDITIONS = (
    "Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Opacity", "Lung Lesion", "Edema",
    "Consolidation", "Pneumonia", "Atelectasis", "Pneumothorax", "Pleural Effusion",
    "Pleural Other", "Fracture", "Support Devices", "No Finding",
)
TOP5 = ("Cardiomegaly", "Edema", "Consolidation", "Atelectasis", "Pleural Effusion")
TOP5_INDEX = np.array([CONDITIONS.index(c) for c in TOP5])
REPO = "StanfordAIMI/RRG_scorers"
WEIGHTS = "chexbert.pth"
ENV_WEIGHTS = "RRG_REVIEW_CHEXBERT"  # read by app.settings (MetricConfig.chexbert_weights)
BACKBONE = "bert-base-uncased"


def f1_scores(hyp: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """(micro F1, macro F1) of binary label matrices (rows: reports, columns: labels).

    Args:
        hyp: the hypotheses' labels.
        ref: the references' labels, same shape.

    Returns:
        Micro F1 over all cells (0 when no label is positive on either side) and the mean of
        the per-label F1s (a label positive on neither side counts as 0).
    """
    hyp, ref = hyp.astype(bool), ref.astype(bool)
    tp = (hyp & ref).sum(axis=0).astype(float)
    fp = (hyp & ~ref).sum(axis=0)
    fn = (~hyp & ref).sum(axis=0)
    denom = 2 * tp + fp + fn
    micro = 2 * tp.sum() / denom.sum() if denom.sum() else 0.0
    per_label = np.divide(2 * tp, denom, out=np.zeros_like(tp), where=denom > 0)
    return float(micro), float(per_label.mean())


def _example_f1(hyp: np.ndarray, ref: np.ndarray) -> np.ndarray:
    tp = (hyp & ref).sum(axis=1)
    denom = hyp.sum(axis=1) + ref.sum(axis=1)
    return np.where(denom > 0, 2 * tp / np.maximum(denom, 1), 1.0)


def build_labeler(config: PretrainedConfig) -> nn.Module:
    """The original CheXbert module: BERT, dropout, 13 four-class heads and one two-class head.

    Built in code (not loaded from a pickled module) so a checkpoint only supplies tensors.

    Args:
        config: the BERT backbone's configuration.

    Returns:
        An untrained labeler; its forward returns 14 logit tensors, one per condition.
    """
    from torch import nn
    from transformers import BertModel

    class CheXbertLabeler(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = BertModel(config)  # untyped in transformers: see untyped_calls_exclude
            self.dropout = nn.Dropout(config.hidden_dropout_prob)
            hidden = config.hidden_size
            self.linear_heads = nn.ModuleList(
                [nn.Linear(hidden, 4) for _ in range(13)] + [nn.Linear(hidden, 2)])

        def forward(self, input_ids: torch.Tensor,
                    attention_mask: torch.Tensor) -> list[torch.Tensor]:
            cls = self.dropout(self.bert(input_ids, attention_mask=attention_mask)[0][:, 0, :])
            return [head(cls) for head in self.linear_heads]

    return CheXbertLabeler()


def load_state(labeler: nn.Module, path: Path, device: str) -> None:
    """Load a chexbert.pth checkpoint ({'model_state_dict': {'module.…': tensor}}).

    Args:
        labeler: the module from `build_labeler`.
        path: the checkpoint (read with weights_only=True: tensors only, no code); a bare
            state dict without 'model_state_dict' is accepted too.
        device: where the tensors are loaded.

    Raises:
        RuntimeError: the checkpoint's tensors do not match the module exactly.
    """
    import torch

    checkpoint = torch.load(path, map_location=device, weights_only=True)
    state = checkpoint.get("model_state_dict", checkpoint)
    state = {k.removeprefix("module."): v for k, v in state.items()
             if not k.endswith("embeddings.position_ids")}
    labeler.load_state_dict(state, strict=True)


@METRICS.metric
class CheXbertF1(ModelMetric["nn.Module"]):
    name = "chexbert"
    chunk = None  # one call: each distinct text is embedded once, batches length-sorted
    keys: tuple[str, ...] = ("chexbert_5_micro_f1", "chexbert_all_micro_f1", "chexbert_5_macro_f1",
            "chexbert_all_macro_f1")
    version = "chexbert-rrg-pos+unc-1"
    model_id = f"{REPO}/{WEIGHTS}"
    reference = "f1chexbert (RRG24 scoring: positive or uncertain = 1)"

    @classmethod
    def from_config(cls, config: MetricConfig) -> CheXbertF1:
        """Args:
            config: the run's settings (weights file, backbone, device, download allowed).

        Returns:
            The metric, not loaded.
        """
        return cls(config.chexbert_weights, config.chexbert_backbone or BACKBONE, config.device,
                   download=config.download)

    def __init__(self, weights: str | None = None, backbone: str = BACKBONE,
                 device: str | None = None, batch_size: int = 32, download: bool = True) -> None:
        self.weights = weights
        self.backbone = backbone
        self.device = device
        self.batch_size = batch_size
        self.download = download
        self._tokenizer: PreTrainedTokenizerBase | None = None
        self._device = "cpu"
        self._cache_id: str | None = None

    def cache_id(self) -> str:
        """The weights file's content hash plus the backbone's config and vocabulary (its own
        weights are replaced by the checkpoint's) and hub revision.

        Returns:
            The cache identity (computed once; may download the weights and backbone).
        """
        if self._cache_id is None:
            from rrg_review.metrics.fingerprint import FileHasher, cache_id, model_folder_files
            from rrg_review.model.hub import resolve

            weights = self._weights_path()
            if weights is None:
                from huggingface_hub import hf_hub_download

                weights = Path(hf_hub_download(REPO, WEIGHTS))
            backbone = resolve(self.backbone, download=self.download)
            files = [weights, *model_folder_files(backbone.path, weights=False)]
            self._cache_id = cache_id(f"{self.model_id}+{self.backbone}",
                                      FileHasher().files(files, backbone.revision))
        return self._cache_id

    def _weights_path(self) -> Path | None:
        if self.weights:
            return Path(self.weights) if Path(self.weights).is_file() else None
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(REPO, WEIGHTS)
        return Path(found) if isinstance(found, str) else None

    def available(self) -> tuple[bool, str]:
        """Whether the weights and the backbone are here or may be downloaded.

        Returns:
            (True, "") when both are cached, or may be fetched (online, downloads allowed, no
            explicit weights file); else (False, what is missing and how to fetch it).
        """
        from rrg_review.model.hub import cached, offline

        missing = []
        if self._weights_path() is None:
            missing.append(self.weights or f"{REPO}/{WEIGHTS}")
        if cached(self.backbone) is None:
            missing.append(self.backbone)
        if missing and (offline() or not self.download or self.weights):
            return False, (f"not on this machine: {', '.join(missing)}; run `rrg-review models "
                           "--fetch-metrics` on a machine with network (or set "
                           f"{ENV_WEIGHTS} to a chexbert.pth)")
        return True, ""

    def _build(self) -> nn.Module:
        import torch
        from transformers import BertConfig, BertTokenizer

        from rrg_review.model.hub import resolve

        weights = self._weights_path()
        if weights is None:
            from huggingface_hub import hf_hub_download

            weights = Path(hf_hub_download(REPO, WEIGHTS))
        backbone = resolve(self.backbone, download=self.download).path
        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        model = build_labeler(BertConfig.from_pretrained(backbone))
        load_state(model, weights, device)
        self._tokenizer = BertTokenizer.from_pretrained(backbone)
        self._device = device
        return model.to(device).eval()

    def _encode(self, text: str) -> list[int]:
        tok = self._tokenizer
        assert tok is not None, "loaded with the model"  # noqa: S101 - narrowing
        pieces = tok.tokenize(" ".join(text.split()))
        if not pieces:
            return [tok.cls_token_id, tok.sep_token_id]
        ids = tok.convert_tokens_to_ids(pieces)
        ids = [tok.cls_token_id, *ids, tok.sep_token_id]
        return [*ids[:511], tok.sep_token_id] if len(ids) > 512 else ids

    def _batches(self, texts: Sequence[str], head: Head) -> np.ndarray:
        """Run `head(model, ids, mask)` over each distinct text once, in batches sorted by
        length; returns the distinct texts' rows in the order of `texts`."""
        import torch

        model = self._load()
        unique = list(dict.fromkeys(texts))
        encoded = [self._encode(t) for t in unique]
        order = sorted(range(len(unique)), key=lambda i: len(encoded[i]))
        rows: list[np.ndarray | None] = [None] * len(unique)
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            width = max(len(encoded[i]) for i in idx)
            ids = torch.zeros((len(idx), width), dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for row, i in enumerate(idx):
                ids[row, :len(encoded[i])] = torch.tensor(encoded[i])
                mask[row, :len(encoded[i])] = 1
            with torch.inference_mode():
                out = head(model, ids.to(self._device), mask.to(self._device))
            for row, i in enumerate(idx):
                rows[i] = out[row]
        where = {t: i for i, t in enumerate(unique)}
        done = [r for r in rows if r is not None]  # every distinct text has its row now
        return np.stack([done[where[t]] for t in texts]) if texts else np.zeros((0, 0))

    def label(self, texts: Sequence[str]) -> np.ndarray:
        """Binary labels (positive or uncertain = 1), one row of 14 per text.

        Args:
            texts: reports (each distinct text is run once).

        Returns:
            An int8 array, texts x CONDITIONS; (0, 14) for no texts.

        Raises:
            MetricUnavailable: the model cannot be loaded here.
        """
        def head(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
            heads: list[torch.Tensor] = model(ids, mask)
            classes = np.stack([h.argmax(dim=1).cpu().numpy() for h in heads], axis=1)
            positive: np.ndarray = (classes == 1) | (classes == 3)  # No Finding: 0/1 only
            return positive.astype(np.int8)

        return self._batches(texts, head).reshape(len(texts), len(CONDITIONS))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The encoder's last-layer [CLS] vector per text (CheXbert `encode.py`: `bert_encoder`
        with logits=False returns `final_hidden[:, 0, :]`, no dropout), as float32.

        Args:
            texts: reports (each distinct text is run once).

        Returns:
            texts x hidden size; (0, 0) for no texts.

        Raises:
            MetricUnavailable: the model cannot be loaded here.
        """
        def head(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
            encoder = cast("nn.Module", model.bert)  # the labeler's BertModel
            cls: torch.Tensor = encoder(ids, attention_mask=mask)[0][:, 0, :]
            return cls.float().cpu().numpy()

        return self._batches(texts, head)

    def compute(self, hyps: Sequence[str], refs: Sequence[str]) -> list[Payload]:
        """The labels of both sides, kept per pair so F1 is computed from them later.

        Args:
            hyps: generated reports, one per pair.
            refs: reference reports, in the same order.

        Returns:
            Per pair {"hyp": 14 labels, "ref": 14 labels} (0 or 1).
        """
        labels = self.label(list(hyps) + list(refs))
        n = len(hyps)
        return [{"hyp": labels[i].tolist(), "ref": labels[n + i].tolist()} for i in range(n)]

    def matrix(self, payloads: Sequence[Payload]) -> np.ndarray:
        """Args:
            payloads: what `compute` returned, one per pair.

        Returns:
            One row per pair: the hypothesis' 14 labels, then the reference's (int8).
        """
        return np.array([p["hyp"] + p["ref"] for p in payloads], dtype=np.int8).reshape(
            len(payloads), 2 * len(CONDITIONS))

    def _split(self, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k = len(CONDITIONS)
        return m[:, :k].astype(bool), m[:, k:].astype(bool)

    def per_sample(self, m: np.ndarray) -> dict[str, np.ndarray]:
        """Per-report (example-based) F1 over the 5 or all 14 labels; one report has no
        micro/macro distinction, so both keys of a label set carry the same values.

        Args:
            m: the matrix from `matrix` (or resampled rows of it).

        Returns:
            key -> one F1 per row; 1.0 where both sides have no positive label.
        """
        hyp, ref = self._split(m)
        top5 = _example_f1(hyp[:, TOP5_INDEX], ref[:, TOP5_INDEX])
        every = _example_f1(hyp, ref)
        return {"chexbert_5_micro_f1": top5, "chexbert_all_micro_f1": every,
                "chexbert_5_macro_f1": top5, "chexbert_all_macro_f1": every}

    def corpus(self, m: np.ndarray) -> dict[str, float]:
        """Micro and macro F1 over all reports, for the top-5 and all 14 conditions.

        Args:
            m: the matrix from `matrix` (or resampled rows of it).

        Returns:
            key -> F1 in [0, 1] (see `f1_scores`); NaN for every key when `m` has no rows
            (not computable, as the other metrics say it; not a score of 0).
        """
        if not len(m):
            return {k: float("nan") for k in self.keys}
        hyp, ref = self._split(m)
        micro5, macro5 = f1_scores(hyp[:, TOP5_INDEX], ref[:, TOP5_INDEX])
        micro, macro = f1_scores(hyp, ref)
        return {"chexbert_5_micro_f1": micro5, "chexbert_all_micro_f1": micro,
                "chexbert_5_macro_f1": macro5, "chexbert_all_macro_f1": macro}



@METRICS.metric
class SembScore(CheXbertF1):
    """SembScore (`semb_score`): cosine similarity of the CheXbert encoder's [CLS] vectors of
    hypothesis and reference, as CXR-Report-Metric `run_eval.py::add_semb_col` (the vectors from
    `CheXbert/src/encode.py`; same weights and tokenization as the labeler above)."""

    name = "semb_score"
    keys = ("semb_score",)
    version = "chexbert-cls-cosine-1"
    reference = "CXR-Report-Metric run_eval.py add_semb_col (CheXbert [CLS] cosine)"

    def compute(self, hyps: Sequence[str], refs: Sequence[str]) -> list[Payload]:
        """Args:
            hyps: generated reports, one per pair.
            refs: reference reports, in the same order.

        Returns:
            Per pair {"semb_score": cosine similarity in [-1, 1]}.
        """
        vectors = self.embed(list(hyps) + list(refs))
        n = len(hyps)
        return [{"semb_score": cosine(vectors[n + i], vectors[i])} for i in range(n)]

    matrix = Metric.matrix
    per_sample = Metric.per_sample
    corpus = Metric.corpus


def cosine(label: np.ndarray, pred: np.ndarray) -> float:
    """The reference's `(label * pred).sum() / (norm(label) * norm(pred))`, in float32 as the
    reference's numpy arrays of torch float32 vectors are.

    Args:
        label: the reference's vector.
        pred: the hypothesis' vector.

    Returns:
        The cosine similarity; NaN when either vector is all zeros.
    """
    label, pred = label.astype(np.float32), pred.astype(np.float32)
    return float((label * pred).sum() / (np.linalg.norm(label) * np.linalg.norm(pred)))
