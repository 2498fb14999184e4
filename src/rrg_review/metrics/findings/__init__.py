"""Findings, not words: a report section as typed findings (observation, presence, side, zone,
severity, change) and the ReXVal error counts an edit suggests (issue #22).

`sentences.split_sentences` -> `extract.FindingExtractor.extract` -> `suggest.suggest_errors`.
"""
