"""The Gradio chat app: ``blocks.build_ui`` (the page and its event handlers), its layout (``layout``), chat
helpers (``chat``), words (``guide``), learning panel (``panel``; the answers' quality: ``quality``; the toy
model's "What changed": ``changed``; the curves as SVG: ``charts``), per-user views (``tenants``) and version
controls (``versions``)."""
