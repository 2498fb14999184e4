"""Reviewing one study: saving a reader's sections (revisions, conflicts), ratings and timing, and
the Gradio-free desk logic behind the page's handlers."""
