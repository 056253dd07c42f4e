"""Serving: the OpenAI-compatible HTTP API and the Gradio UI, both on one ``ChatService``.

``openai_schema`` (the wire format and its errors) ← ``chat_service`` (one turn: validate, render, generate,
record) ← ``ui`` (Gradio) and ``server`` (the FastAPI routes, the app and its server thread).
"""
