"""Evaluation and export: the metrics panel of one study, and the rows -> scoring steps -> results
-> files/HTML report pipeline of an export."""
