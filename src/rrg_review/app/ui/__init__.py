"""The Gradio UI: thin handlers over app.services."""
