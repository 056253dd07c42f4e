"""openclaw-trl: train your own chat model by talking to it.

The package ``__init__`` imports nothing heavy on purpose: ``import openclaw_trl.judge`` must stay
pure Python, and torch/trl/vllm/gradio are imported by the modules that need them.
"""

__version__ = "0.1.0"
