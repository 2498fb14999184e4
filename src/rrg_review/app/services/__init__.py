"""Use cases shared by the CLI and the UI. Nothing here imports Gradio."""
