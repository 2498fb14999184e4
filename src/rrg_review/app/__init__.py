"""The application layer, one subpackage per feature (accounts, ingest, drafting, viewer,
worklist, review, evaluation), each with its Gradio-free service and, where the page shows it,
its panel; page.py composes the panels, server.py and serve.py serve the page, cli.py is the
command line, settings.py the configuration chosen once."""
