"""The Gradio chat app: ``blocks.build_ui`` (the page and its event handlers), its layout (``layout``), chat
helpers (``chat``), words (``guide``), learning panel (``panel``), per-user views (``tenants``) and version
controls (``versions``)."""
