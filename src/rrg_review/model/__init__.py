"""Drafting models: study records in, draft findings/impression with provenance out.

`import model` loads no heavy library; torch and transformers are imported by the backends when a
drafter is built (see `model.registry.load_drafter`).
"""
