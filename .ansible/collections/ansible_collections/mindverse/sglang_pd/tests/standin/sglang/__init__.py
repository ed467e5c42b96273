"""CPU stand-in for the SGLang server, for tests only.

This package is NOT SGLang. It answers the same command line
(``python -m sglang.launch_server ...``) and the HTTP endpoints the
collection's roles and tests use, without a GPU or a model.
"""

__version__ = "0.5.14"
