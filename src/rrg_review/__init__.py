"""rrg-review: a local review workstation for AI-drafted chest X-ray reports.

Layers, lowest first: core < studies < model < metrics < db < app; imports point downward only
(tests/test_layers.py keeps it so).
"""
