"""The application layer: use-case services (Gradio-free), the CLI, and the Gradio UI in app.ui."""
