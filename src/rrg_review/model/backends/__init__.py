"""Drafter backends, one module each; imported only when a preset needs them."""
