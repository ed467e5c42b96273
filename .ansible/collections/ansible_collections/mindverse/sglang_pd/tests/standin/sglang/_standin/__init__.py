"""Internals of the SGLang stand-in (argument parsing, HTTP, PD bootstrap, replies)."""
