"""Fixtures for a real llama.cpp server (xllamacpp) on the default Gemma model. Owned by the tokenizer work."""
