"""Findings, not words: a report section as typed findings (observation, presence, side, zone,
severity, change), the ReXVal error counts an edit suggests, and the flags a draft raises before
the reader edits it (issue #22).

`sentences.split_sentences` -> `extract.FindingExtractor.extract` -> `suggest.suggest_errors`
(and `flags.flag_draft`); `pairs` reads and writes the `suggest-errors` command's JSON lines.
"""
